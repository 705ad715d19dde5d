"""MLX Lab's quantized matmul for MLX's CPU backend: where it is built, and loading it.

`build.py` (run by `make setup`) compiles the extension into `build/` and records in
`build/status.json` whether it built and passed its self-test against
`mx.quantized_matmul`; `load` trusts only a library whose status says so. The library
reads no environment variable: `load` hands it the settings' values as it imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from labsettings import engine_settings
from native import extension

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
STATUS = BUILD / "status.json"
# Points at another build of the library, or at nothing ("" or "off") to turn it off.
LIBRARY_VARIABLE = "MLXLAB_QMM_LIBRARY"
# The library's setters and the settings they take, given once, when it is imported; a
# test or a bench that changes one afterwards keeps its change.
TUNABLES = {
    "set_thread_count": "qmm_threads",
    "set_spin_microseconds": "qmm_spin_us",
    "set_parallel_min_work": "qmm_parallel_min",
    "set_avx512_allowed": "qmm_avx512",
    "set_int8_activations": "qmm_int8",
    "set_int16_activations": "qmm_int16",
}


class KernelUnavailable(RuntimeError):
    """Why the extension cannot be used in this process."""


def built_library() -> Path | None:
    found = sorted(BUILD.glob("_qmm*.so"))
    return found[0] if found else None


def read_status() -> dict:
    return extension.read_status(STATUS)


def load(path: str | os.PathLike | None = None) -> ModuleType:
    """Import the compiled module, configured; raises KernelUnavailable saying why it
    cannot be."""
    explicit = engine_settings.qmm_library if path is None else os.fspath(path)
    library = extension.locate(explicit, LIBRARY_VARIABLE, BUILD, "_qmm*.so",
                               "the quantized matmul kernel", KernelUnavailable)  # fmt: skip
    return extension.import_extension("_qmm", library, KernelUnavailable, configure)


def configure(module: ModuleType) -> None:
    """Give the library the settings' values (TUNABLES)."""
    for setter, name in TUNABLES.items():
        if hasattr(module, setter):  # an older build (MLXLAB_QMM_LIBRARY) may lack one
            getattr(module, setter)(getattr(engine_settings, name))
