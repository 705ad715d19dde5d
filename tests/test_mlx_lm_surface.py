"""The engine's reach into mlx-lm: its public surface only.

A private member (`_next`, `_generation_batch`, `_idx`...), an assignment into mlx-lm's
modules or classes, or a subclass of its batch generator or batch caches ties the engine
to one release's internals: a new mlx-lm may change them silently, and a fresh `make
setup` would then serve wrong or not at all. The batch loop (inference/engine/loop/) and
its caches (inference/engine/kv/) are our own for that reason; this test walks the syntax
tree of every module and fails on any such reach.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

from tests.conftest import ROOT

SCANNED = ("inference", "native", "jobs")
BATCH_CLASSES = {"BatchGenerator", "GenerationBatch", "PromptProcessingBatch"}


@functools.cache
def mlx_lm_private_names() -> frozenset[str]:
    """Every `_name` mlx-lm defines or reads: what a private access would name."""
    package = Path(importlib.util.find_spec("mlx_lm").origin).parent
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node, "attr", None) or getattr(node, "name", None)
            if isinstance(name, str) and name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return frozenset(names)


def _mlx_lm_imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it is in mlx-lm, for every import of mlx-lm."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mlx_lm":
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mlx_lm":
                    found[(alias.asname or alias.name).split(".")[0]] = alias.name
    return found


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def private_uses(path: Path) -> list[str]:
    """What `path` takes from mlx-lm beyond its public surface, one line each."""
    tree = ast.parse(path.read_text())
    imported = _mlx_lm_imports(tree)
    private = mlx_lm_private_names()
    # Names bound to a module looked up at run time: patching one patches mlx-lm's models.
    looked_up = {
        t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and "sys.modules" in ast.unparse(n.value)
        for t in n.targets if isinstance(t, ast.Name)
    }  # fmt: skip
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in {
            v.rsplit(".", 1)[0] for v in imported.values()
        }:
            uses += [
                f"{node.lineno}: imports {a.name}" for a in node.names if a.name.startswith("_")
            ]
        elif isinstance(node, ast.ClassDef):
            uses += _subclass_uses(node, imported, private)
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            root = _root(node.value)
            if root in imported or (node.attr in private and root not in ("self", "cls")):
                uses.append(f"{node.lineno}: reads {ast.unparse(node)}")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and _root(target) in {*imported, *looked_up}:
                    uses.append(f"{node.lineno}: assigns {ast.unparse(target)}")
    return uses


def _subclass_uses(node: ast.ClassDef, imported: dict, private: frozenset) -> list[str]:
    bases = [ast.unparse(b) for b in node.bases if _root(b) in imported]
    if not bases:
        return []
    uses = []
    for base in bases:
        name = base.rsplit(".", 1)[-1]
        if name in BATCH_CLASSES or "Batch" in name and "Cache" in name:
            uses.append(f"{node.lineno}: subclasses {base}")
    own = {
        n.attr for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and _root(n) == "self"
    } | {n.name for n in node.body if isinstance(n, ast.FunctionDef)}  # fmt: skip
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and _root(n) == "self" and n.attr in private - own:
            uses.append(f"{n.lineno}: inherits {n.attr}")
    for n in node.body:  # overriding a private method is reaching into it, too
        if isinstance(n, ast.FunctionDef) and n.name in private and n.name.startswith("_"):
            uses.append(f"{n.lineno}: overrides {n.name}")
    return uses


def scan() -> dict[str, list[str]]:
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if uses := private_uses(path):
                found[str(path.relative_to(ROOT))] = uses
    return found


def test_nothing_reaches_into_mlx_lm_internals():
    found = scan()
    assert not found, f"uses of mlx-lm's internals: {found}"


def test_the_scan_finds_each_kind_of_reach(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from mlx_lm.generate import BatchGenerator\n"
        "from mlx_lm.models.cache import BatchKVCache, _BaseCache\n"
        "class Mine(BatchGenerator):\n"
        "    def _next(self):\n"
        "        return self._generation_batch\n"
        "BatchKVCache.make_mask = None\n"
        "import sys\n"
        "llama = sys.modules.get('mlx_lm.models.llama')\n"
        "llama.scaled_dot_product_attention = None\n"
        "def f(cache):\n"
        "    return cache._idx\n"
    )
    uses = " ".join(private_uses(sample))
    for words in ("imports _BaseCache", "subclasses BatchGenerator", "overrides _next",
                  "inherits _generation_batch", "assigns BatchKVCache.make_mask", "reads cache._idx",
                  "assigns llama.scaled_dot_product_attention"):  # fmt: skip
        assert words in uses, uses
