"""MLX Lab's CUDA decode step for MLX's CUDA backend: where it is built, and loading it.

`build.py` (run by `make setup` where nvcc and mlx's CUDA wheel are installed) compiles
the extension into `build/` and records in `build/status.json` whether it built; `load`
trusts only a library whose status says so, or the one MLXLAB_CUDA_DECODE_LIBRARY names.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
STATUS = BUILD / "status.json"
# Points at another build of the library, or at nothing ("", 0 or off) to turn it off.
LIBRARY_VARIABLE = "MLXLAB_CUDA_DECODE_LIBRARY"


class StepUnavailable(RuntimeError):
    """Why the extension cannot be used in this process."""


def read_status() -> dict:
    try:
        return json.loads(STATUS.read_text())
    except (OSError, ValueError):
        return {}


def load(path: str | os.PathLike | None = None) -> ModuleType:
    """Import the compiled module; raises StepUnavailable saying why it cannot be.

    `mlx.core` must be imported first: the module takes its arrays (nanobind's "mlx"
    domain) and links its library.
    """
    explicit = os.environ.get(LIBRARY_VARIABLE) if path is None else os.fspath(path)
    if explicit is not None and explicit.strip().lower() in ("", "0", "off"):
        raise StepUnavailable(f"the CUDA decode step is turned off ({LIBRARY_VARIABLE})")
    if explicit is None:
        status = read_status()
        if not status.get("ok"):
            why = status.get("reason") or "it was never built (make setup builds it on a GPU)"
            raise StepUnavailable(f"the CUDA decode step is not built: {why}")
        found = sorted(BUILD.glob("_cuda_decode*.so"))
        if not found:
            raise StepUnavailable("the CUDA decode step is missing from its build folder")
        library = found[0]
    else:
        library = Path(explicit)
        if not library.is_file():
            raise StepUnavailable(f"no CUDA decode step at {library}")
    import mlx.core  # noqa: F401  (registers mx.array with nanobind before our module loads)

    spec = importlib.util.spec_from_file_location("_cuda_decode", library)
    if spec is None or spec.loader is None:
        raise StepUnavailable(f"{library} is not a Python extension")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise StepUnavailable(f"{library} does not load: {error}") from error
    return module
