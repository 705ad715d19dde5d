"""MLX Lab's quantized matmul for MLX's CPU backend: where it is built, and loading it.

`build.py` (run by `make setup`) compiles the extension into `build/` and records in
`build/status.json` whether it built and passed its self-test against
`mx.quantized_matmul`; `load` trusts only a library whose status says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from native import extension

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
    return extension.read_status(STATUS)


def load(path: str | os.PathLike | None = None) -> ModuleType:
    """Import the compiled module; raises KernelUnavailable saying why it cannot be."""
    explicit = os.environ.get(LIBRARY_VARIABLE) if path is None else os.fspath(path)
    library = extension.locate(explicit, LIBRARY_VARIABLE, BUILD, "_qmm*.so",
                               "the quantized matmul kernel", KernelUnavailable)  # fmt: skip
    return extension.import_extension("_qmm", library, KernelUnavailable)
