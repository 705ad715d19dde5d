"""docs/SETTINGS.md, written from the table: `.venv/bin/python -m labsettings.doc > docs/SETTINGS.md`.

tests/test_labsettings.py fails while the file differs from what this writes.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

from . import TABLE, LabSettings
from .engine import EngineSettings
from .places import BASE_DIR, PlaceSettings
from .rows import Derived, Setting
from .workers import WorkerSettings

COMMAND = ".venv/bin/python -m labsettings.doc > docs/SETTINGS.md"
TYPES = {item.name: str(item.type) for item in dataclasses.fields(LabSettings)}

# The table's classes in its order, each a section: (class, heading, where its rows live).
SECTIONS = (
    (PlaceSettings, "Where things live", "labsettings/places.py"),
    (WorkerSettings, "Models and their workers", "labsettings/workers.py"),
    (EngineSettings, "The engine and its native libraries", "labsettings/engine.py"),
    (LabSettings, "Requests, caches, access, jobs and publishing", "labsettings/__init__.py"),
)

INTRO = f"""# Settings

Every setting of MLX Lab is an environment variable, and every one is a row of one typed
table, `labsettings/`: its variable, type, default and meaning. Django code reads the table
as `lab_settings` (`settings.MLXLAB`, built when Django starts); the engine and the native
libraries' Python read their rows as `engine_settings`, from the process environment, with
no Django; the C++ libraries read no variable and take their values from the Python that
loads them. A value that does not parse stops the process with an error naming its variable.

A boolean is `1`, `true`, `yes` or `on`, or `0`, `false`, `no`, `off` or empty. An optional
value left empty is unset. A secret's default is not shown.

This file is generated from the table (`{COMMAND}`); edit the table, not this file.
"""


def markdown() -> str:
    """The whole of docs/SETTINGS.md."""
    parts = [INTRO]
    placed: list[str] = []
    for table, heading, home in SECTIONS:
        rows = _own_rows(table)
        placed += [row.name for row in rows]
        parts.append(_section(heading, home, rows))
    missing = [row.env for row in TABLE if row.name not in placed]
    if missing:
        raise LookupError(f"rows in no section of labsettings/doc.py: {missing}")
    return "\n".join(parts)


def _own_rows(table: type) -> list[Setting]:
    """The rows `table` declares itself, not those of the classes it extends."""
    own = inspect.get_annotations(table)
    return [row for row in TABLE if row.name in own]


def _section(heading: str, home: str, rows: list[Setting]) -> str:
    lines = [f"## {heading}", "", f"In `{home}`.", ""]
    lines += ["| Variable | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
    for row in rows:
        cells = (f"`{row.env}`", _type(row), _default(row), row.meaning)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _type(row: Setting) -> str:
    choices = getattr(row.parse, "choices", None)
    if choices:
        return ", ".join(f"`{choice}`" for choice in choices)
    return f"`{TYPES[row.name]}`"


def _default(row: Setting) -> str:
    return "*secret*" if row.secret else _shown(row.default)


def _shown(value: Any) -> str:
    if isinstance(value, Derived):
        return f"`{value.text}`"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, Path):
        # The checkout's own path differs from machine to machine.
        inside = value.is_relative_to(BASE_DIR)
        return f"`{value.relative_to(BASE_DIR)}` in the checkout" if inside else f"`{value}`"
    if value in ("", {}, ()):
        return "empty" if value == "" else "none"
    if isinstance(value, dict):
        return ", ".join(f"`{key}={item}`" for key, item in value.items())
    return f"`{value}`"


if __name__ == "__main__":
    print(markdown(), end="")
