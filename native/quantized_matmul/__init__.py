"""MLX Lab's quantized matmul for MLX's CPU backend: where it is built, and loading it.

`build.py` (run by `make setup`) compiles the extension into `build/` and records in
`build/status.json` whether it built and passed its self-test against
`mx.quantized_matmul`; `load` trusts only a library whose status says so.
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
# Points at another build of the library, or at nothing ("" or "off") to turn it off.
LIBRARY_VARIABLE = "MLXLAB_QMM_LIBRARY"


class KernelUnavailable(RuntimeError):
    """Why the extension cannot be used in this process."""


def built_library() -> Path | None:
    found = sorted(BUILD.glob("_qmm*.so"))
    return found[0] if found else None


def read_status() -> dict:
    try:
        return json.loads(STATUS.read_text())
    except (OSError, ValueError):
        return {}


def load(path: str | os.PathLike | None = None) -> ModuleType:
    """Import the compiled module; raises KernelUnavailable saying why it cannot be.

    `mlx.core` must be imported first: the module takes its arrays (nanobind's
    "mlx" domain) and links its library.
    """
    explicit = os.environ.get(LIBRARY_VARIABLE) if path is None else os.fspath(path)
    if explicit is not None and explicit.strip().lower() in ("", "0", "off"):
        raise KernelUnavailable(f"the quantized matmul kernel is turned off ({LIBRARY_VARIABLE})")
    if explicit is None:
        status = read_status()
        if not status.get("ok"):
            why = status.get("reason") or "it was never built (make setup builds it)"
            raise KernelUnavailable(f"the quantized matmul kernel is not built: {why}")
        library = built_library()
        if library is None:
            raise KernelUnavailable("the quantized matmul kernel is missing from its build folder")
    else:
        library = Path(explicit)
        if not library.is_file():
            raise KernelUnavailable(f"no quantized matmul kernel at {library}")
    return _import(library)


def _import(library: Path) -> ModuleType:
    import mlx.core  # noqa: F401  (registers mx.array with nanobind before our module loads)

    spec = importlib.util.spec_from_file_location("_qmm", library)
    if spec is None or spec.loader is None:
        raise KernelUnavailable(f"{library} is not a Python extension")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise KernelUnavailable(f"{library} does not load: {error}") from error
    return module
