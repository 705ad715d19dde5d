"""What a process that runs MLX does first (process/startup.py): glibc's fast bins off.

Each check runs in a fresh interpreter, whose malloc nothing else has touched.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Frees 100 blocks of 64 bytes (7 stay in the thread's tcache, the rest go to a bin), then
# prints how many free blocks the fast bins hold (mallinfo2's smblks).
FREED_SMALL_BLOCKS = """
import ctypes, ctypes.util, sys
if sys.argv[1] == "prepared":
    from inference.engine.process.startup import prepare_mlx_process
    prepare_mlx_process()
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = Info
blocks = [libc.malloc(64) for _ in range(100)]
for block in blocks:
    libc.free(block)
print(libc.mallinfo2().smblks)
"""


def _fast_bin_blocks(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FREED_SMALL_BLOCKS, mode],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="fast bins are glibc's")
def test_a_process_that_runs_mlx_keeps_no_small_freed_blocks_unmerged():
    assert _fast_bin_blocks("plain") > 50  # glibc's default: they wait in the fast bins
    assert _fast_bin_blocks("prepared") == 0
