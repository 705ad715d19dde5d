"""The web tier speaks to model workers through inference/protocol alone, and loads no MLX.

The wire types, the link, the sampling parameters and events are plain data: a web process
that imports MLX pays for it in memory and start time, and ties its own upgrade to MLX's.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

HEAVY = ("mlx", "mlx_lm", "transformers", "torch")
# Web-tier code: views, API surfaces, workers' supervisor, pages, keys, the Hub. The Celery
# app (mlxlab/celery.py) prepares job processes for MLX; model registration converts GGUF
# files in whichever process imports them (inference/model_registry.py).
WEB_TIER = ["access", "lab", "publishing", "mlxlab", "inference"]
NOT_WEB = {"inference/engine", "inference/gguf", "inference/management", "mlxlab/celery.py"}
ALLOWED_ENGINE_IMPORTS = {"inference/model_registry.py": {"inference.engine.process.startup"}}

LOADED = """
import json, sys
{setup}
for name in {modules}:
    __import__(name)
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}})))
"""


def loaded_packages(modules: list[str], django: bool = False) -> set[str]:
    setup = "import django; django.setup()" if django else ""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mlxlab.settings", "MLXLAB_PRELOAD": "0"}
    done = subprocess.run(
        [sys.executable, "-c", LOADED.format(setup=setup, modules=modules)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_protocol_loads_no_mlx():
    package = ROOT / "inference" / "protocol"
    modules = [f"inference.protocol.{p.stem}" for p in package.glob("*.py")]
    assert "inference.protocol.wire" in modules and "inference.protocol.link" in modules
    assert not loaded_packages(modules) & set(HEAVY)


def test_the_web_process_loads_no_mlx():
    # Everything a web request can reach: the ASGI app (HTTP and websockets) and every view.
    web = [
        "mlxlab.asgi", "mlxlab.urls", "inference.views_openai", "inference.views_anthropic",
        "inference.views_responses", "inference.views_status", "lab.api_models", "lab.api_hub",
        "lab.consumers", "lab.views", "jobs.api", "jobs.views", "publishing.views",
    ]  # fmt: skip
    loaded = loaded_packages(web, django=True)
    assert "inference" in loaded and not loaded & set(HEAVY)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = path.relative_to(ROOT).with_suffix("").parts[: -node.level]
                base = ".".join([*package, base] if base else package)
            found.add(base)
    return found


def test_the_web_tier_imports_the_engine_through_the_protocol_only():
    offending = []
    for top in WEB_TIER:
        for path in sorted((ROOT / top).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if any(name.startswith(prefix) for prefix in NOT_WEB) or "/migrations/" in name:
                continue
            allowed = ALLOWED_ENGINE_IMPORTS.get(name, set())
            for module in _imports(path):
                engine = module == "inference.engine" or module.startswith("inference.engine.")
                if (engine and module not in allowed) or module.split(".")[0] in HEAVY:
                    offending.append(f"{name}: {module}")
    assert not offending


def test_no_package_init_does_anything_on_import():
    # A call at a package's top level (a BLAS load, a patch) runs for whoever imports any
    # module below it; such work is an explicit call where a process starts.
    busy = []
    for path in sorted(ROOT.glob("*/**/__init__.py")):
        if ".venv" in path.parts or "var" in path.parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                busy.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not busy
