"""What a finished batch freed goes back to the operating system (loop/freed_memory.py)."""

from __future__ import annotations

import platform

import pytest

from inference.engine.loop.freed_memory import release_freed_memory

BLOCK = 64 * 1024  # under glibc's mmap threshold: served from the heap, kept there when freed


def _anonymous_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("RssAnon"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_memory_freed_inside_the_heap_is_returned():
    blocks = [bytearray(BLOCK) for _ in range(2400)]  # 150 MB, touched
    kept = blocks[15::16]  # a block in use every 1 MB: free space no trim of the top reaches
    del blocks
    held = _anonymous_mb()
    assert release_freed_memory()
    assert _anonymous_mb() < held - 100
    assert all(len(block) == BLOCK for block in kept)


def test_mlx_s_buffer_cache_goes_too_when_asked():
    import mlx.core as mx

    arrays = [mx.ones((256, 1024)) for _ in range(8)]
    mx.eval(arrays)
    del arrays  # their 8 MB wait in MLX's cache for reuse
    assert mx.get_cache_memory() > 4 * 2**20
    release_freed_memory()
    assert mx.get_cache_memory() > 4 * 2**20
    release_freed_memory(mlx_cache=True)
    assert mx.get_cache_memory() == 0
