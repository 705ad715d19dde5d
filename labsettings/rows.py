"""The table's rows: a setting's data, carried in a LabSettings field's metadata."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Derived:
    """A default computed from settings above it in the table (a folder under var_dir)."""

    compute: Callable[[Mapping[str, Any]], Any]
    text: str  # how the table reads, for people: "var_dir/models"

    def __repr__(self) -> str:
        return self.text


def under_var(name: str) -> Derived:
    return Derived(lambda values: values["var_dir"] / name, f"var_dir/{name}")


@dataclass(frozen=True)
class Setting:
    """One row of the table."""

    name: str  # LabSettings' attribute
    env: str  # the environment variable
    parse: Callable[[str], Any]
    default: Any  # a value, or Derived
    meaning: str
    # The parsed value adds to the default (a dict) rather than replacing it.
    merge: bool = False
    # Never shown: not in the object's repr (Django's debug page), nor in a parse error.
    secret: bool = False

    def default_for(self, values: Mapping[str, Any]) -> Any:
        return self.default.compute(values) if isinstance(self.default, Derived) else self.default


def setting(
    env: str,
    parse: Callable[[str], Any],
    default: Any,
    meaning: str,
    *,
    merge: bool = False,
    secret: bool = False,
) -> Any:
    """A LabSettings field: the row's data rides in the field's metadata. No dataclass
    default: only from_environ (and replace) build the object, so every value is set."""
    row = {"env": env, "parse": parse, "default": default, "meaning": meaning}
    return field(repr=not secret, metadata={**row, "merge": merge, "secret": secret})
