"""What a process that runs MLX does first: before anything imports mlx.core, put the
optimized BLAS under it (cpu_fast_path.py) and keep PyTorch out of transformers
(torch_free.py). Model workers, job workers, the pull command and the tests call it."""

from __future__ import annotations

from ..acceleration.cpu_fast_path import load_blas_from_environment
from ..acceleration.torch_free import keep_torch_out_of_transformers

_prepared = False


def prepare_mlx_process() -> None:
    """Idempotent; must run before mlx.core is imported to take the BLAS."""
    global _prepared
    if not _prepared:
        _prepared = True
        load_blas_from_environment()
        keep_torch_out_of_transformers()
