"""MLX Lab's CUDA decode step for MLX's CUDA backend: where it is built, and loading it.

`build.py` (run by `make setup` where nvcc and mlx's CUDA wheel are installed) compiles
the extension into `build/` and records in `build/status.json` whether it built; `load`
trusts only a library whose status says so, or the one MLXLAB_CUDA_DECODE_LIBRARY names.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from labsettings import engine_settings
from native import extension

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
# Points at another build of the library, or at nothing ("", 0 or off) to turn it off.
LIBRARY_VARIABLE = "MLXLAB_CUDA_DECODE_LIBRARY"


class StepUnavailable(RuntimeError):
    """Why the extension cannot be used in this process."""


def load(path: str | os.PathLike | None = None) -> ModuleType:
    """Import the compiled module; raises StepUnavailable saying why it cannot be."""
    explicit = engine_settings.cuda_decode_library if path is None else os.fspath(path)
    library = extension.locate(explicit, LIBRARY_VARIABLE, BUILD, "_cuda_decode*.so",
                               "the CUDA decode step", StepUnavailable)  # fmt: skip
    return extension.import_extension("_cuda_decode", library, StepUnavailable)
