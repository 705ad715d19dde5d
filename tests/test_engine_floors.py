"""The engine's floors: each subpackage imports only from the floors below it.

From the bottom: the protocol (what crosses to the web side), then `kv` (the batch's KV
caches, in a layout the engine owns), `media` (vision models through mlx-vlm: their
prompts' media made model inputs), `acceleration` (loading
a model, its native fast paths), `embedding` (embedding models: batched, pooled), `drafts`
(where drafted tokens come from), `prompting`
(a call made a request: template, grammar, output parsing), `caching` (KV, prompt and
checkpoint caches, durable on disk), `loop` (the batch and its steps) and `process` (the
worker process around an engine). A floor that imports one above it would make a circle.
"""

from __future__ import annotations

import ast

import inference.engine as engine_package
from tests.conftest import ROOT

FLOORS = [
    "kv",
    "media",
    "acceleration",
    "embedding",
    "drafts",
    "prompting",
    "caching",
    "loop",
    "process",
]
ENGINE = ROOT / "inference" / "engine"


def engine_imports(path) -> set[str]:
    """The engine floors (or `protocol`) a module imports from."""
    module = path.relative_to(ROOT).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module[: len(module) - node.level]
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            if target[:2] == ["inference", "engine"] and len(target) > 2:
                found.add(target[2])
            elif target[:2] == ["inference", "protocol"]:
                found.add("protocol")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["inference", "engine"] and len(parts) > 2:
                    found.add(parts[2])
    return found


def test_every_engine_module_lives_on_a_floor():
    loose = [p.name for p in ENGINE.glob("*.py") if p.name != "__init__.py"]
    assert not loose
    assert sorted(
        p.name for p in ENGINE.iterdir() if p.is_dir() and p.name != "__pycache__"
    ) == sorted(FLOORS)


def test_no_floor_imports_one_above_it():
    upward = []
    for level, floor in enumerate(FLOORS):
        allowed = {"protocol", *FLOORS[: level + 1]}
        for path in sorted((ENGINE / floor).glob("*.py")):
            for target in engine_imports(path) - allowed:
                upward.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not upward


def test_each_floor_says_what_it_owns():
    for floor in FLOORS:
        doc = ast.get_docstring(ast.parse((ENGINE / floor / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) <= 3, floor


def test_the_package_still_names_its_entry_points():
    for name in engine_package.__all__:
        assert getattr(engine_package, name) is not None
