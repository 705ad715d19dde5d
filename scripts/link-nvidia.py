"""Give the venv's MLX CUDA build the NVIDIA libraries of the Python the venv extends.

    .venv/bin/python scripts/link-nvidia.py

MLX's CUDA library finds cuBLAS, cuDNN, NCCL, NVRTC... only beside itself: its RPATH is
$ORIGIN/../../nvidia/<library>/lib, in the venv's own site-packages. A venv made with
--system-site-packages (VENV_FLAGS, the CUDA build's default) takes the nvidia-* wheels from
the machine's Python (its CUDA torch's) instead of installing a second copy, so each
nvidia/<library> folder found on the path outside the venv is linked into the venv's
site-packages/nvidia, where one of the venv's own is missing. Quiet; nothing to do in a venv
that has its own (or where no MLX CUDA wheel is installed). `make setup` runs it on the CUDA
build, after pip: a later pip install of an nvidia-* wheel writes into the venv's own folders,
never through these links.
"""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path


def main() -> int:
    if sys.prefix == sys.base_prefix:
        return 0  # not a venv: its libraries are where MLX looks
    if importlib.util.find_spec("mlx") is None:
        return 0
    own = Path(sysconfig.get_path("purelib")).resolve()
    linked = own / "nvidia"
    for entry in sys.path:
        folder = Path(entry or ".").resolve() / "nvidia"
        if not folder.is_dir() or folder.parent == own or own in folder.parents:
            continue
        for library in sorted(folder.iterdir()):
            if not library.is_dir() or library.name.startswith(("_", ".")):
                continue
            target = linked / library.name
            if target.exists() or target.is_symlink():
                continue
            linked.mkdir(exist_ok=True)
            target.symlink_to(library)
    return 0


if __name__ == "__main__":
    sys.exit(main())
