"""access sits below the apps whose endpoints it guards: it imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

import access

ABOVE = {"inference", "lab", "jobs", "publishing", "mlxlab"}


def imported_modules(source: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_access_imports_no_app_above_it():
    package = Path(access.__file__).parent
    upward = {
        f"{path.relative_to(package)}: {module}"
        for path in package.rglob("*.py")
        for module in imported_modules(path)
        if module.split(".")[0] in ABOVE
    }
    assert not upward
