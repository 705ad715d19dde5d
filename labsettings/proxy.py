"""The two ways code reads the table: `lab_settings` and `engine_settings`.

`lab_settings` is `django.conf.settings.MLXLAB`, read afresh on every access. So an
override (pytest-django's `settings` fixture, `override_settings`) takes effect at once,
with no cache to reload on `setting_changed` as DRF's `api_settings` must. An override
replaces the whole object: `settings.MLXLAB = settings.MLXLAB.replace(max_n=2)`.

`engine_settings` is for code without Django (the engine, native/'s Python): each access
parses its one row from the process environment. A variable set after the process
started (a test's monkeypatch) counts at once, and a bad value fails only what reads it.
"""

from __future__ import annotations

import os
from typing import Any

from .rows import Derived, rows_of


class LabSettingsProxy:
    """`settings.MLXLAB`, looked up on every attribute access."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        from django.conf import settings

        return getattr(settings.MLXLAB, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("lab settings are read-only: override settings.MLXLAB instead")

    def __repr__(self) -> str:
        from django.conf import settings

        return repr(settings.MLXLAB)


class EnvironmentReader:
    """A table's rows, each parsed from `os.environ` when it is read."""

    __slots__ = ("_rows",)

    def __init__(self, table: type) -> None:
        rows = {row.name: row for row in rows_of(table)}
        # Without the rows above it, a Derived default has nothing to derive from.
        derived = [row.env for row in rows.values() if isinstance(row.default, Derived)]
        if derived:
            raise TypeError(f"read from the environment one row at a time: {derived}")
        object.__setattr__(self, "_rows", rows)

    def __getattr__(self, name: str) -> Any:
        row = None if name.startswith("_") else self._rows.get(name)
        if row is None:
            raise AttributeError(f"no setting {name!r}")
        return row.read(os.environ, {})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("settings are read-only: set the environment variable instead")

    def __dir__(self) -> list[str]:
        return sorted(self._rows)
