"""The table's rows: a setting's data, carried in a settings class's field's metadata;
reading one row from an environment; and what every class of rows can do (`Table`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from django.core.exceptions import ImproperlyConfigured


class SettingError(ImproperlyConfigured, ValueError):
    """A variable whose value does not parse. ImproperlyConfigured to Django; a ValueError
    to the engine, which has no Django and already handles ValueError where a model cannot
    take a step."""


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

    def read(self, environ: Mapping[str, str], values: Mapping[str, Any]) -> Any:
        """The variable's value in `environ`, else the default (a Derived one computed from
        `values`, the rows above). SettingError names the variable whose value does not parse."""
        default = self.default_for(values)
        text = environ.get(self.env)
        if text is None:
            return default
        try:
            value = self.parse(text)
        except ValueError as error:
            shown = "" if self.secret else f" (got {text!r})"
            raise SettingError(f"{self.env}: {error}{shown}") from None
        return {**default, **value} if self.merge else value


def rows_of(table: type) -> tuple[Setting, ...]:
    """A class's rows in the order of its fields: the classes it extends first."""
    return tuple(Setting(name=item.name, **item.metadata) for item in dataclasses.fields(table))


class Table:
    """What a class of rows can do: be read from an environment, and be copied changed."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Self:
        """Every setting from `environ`, else its default. SettingError (ImproperlyConfigured)
        names the variable whose value does not parse."""
        values: dict[str, Any] = {}
        for row in rows_of(cls):
            values[row.name] = row.read(environ, values)
        return cls(**values)

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` (attribute names), for tests' overrides."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


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
