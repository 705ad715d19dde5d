"""What `make setup` installs for a backend: pyproject's dependencies, the test extra and, for
MLX's CUDA build, the cuda extra; one requirement a line on stdout.

    python scripts/requirements.py cuda|cpu   (anything but cuda: the CPU build's list)

For cuda two lines of the dependencies give way. `mlx[cpu]`: the CUDA wheel (the cuda extra's
`mlx[cuda13]`) is the backend there, and both wheels write mlx/lib/libmlx.so. The torch pin:
it names the small CPU build for CI machines; on a GPU machine xgrammar takes the machine's
own CUDA torch where the venv sees one (VENV_FLAGS in the Makefile), else pip's newest. The
wheelhouse for a machine with no network (scripts/gpu-wheelhouse.py) reads the same list.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Dependencies the CUDA build replaces: the name and extras a line starts with.
NOT_ON_CUDA = ("mlx[cpu]", "torch")


def requirements(backend: str) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    if backend != "cuda":
        return project["dependencies"] + extras["test"]
    return [line for line in project["dependencies"] if _head(line) not in NOT_ON_CUDA] + (
        extras["test"] + extras["cuda"]
    )


def _head(line: str) -> str:
    """`mlx[cpu]>=0.32; ...` -> `mlx[cpu]`; `torch==2.13.0; ...` -> `torch`."""
    match = re.match(r"\s*([A-Za-z0-9._-]+(\[[^\]]*\])?)", line)
    return match.group(1).replace(" ", "").lower() if match else line


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: requirements.py cuda|cpu")
    print("\n".join(requirements(sys.argv[1])))
