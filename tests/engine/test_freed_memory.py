"""What a finished batch freed goes back to the operating system (loop/freed_memory.py)."""

from __future__ import annotations

import platform
import threading

import mlx.core as mx
import pytest

from inference.engine import GenerationRequest
from inference.engine.acceleration.accelerator import on_gpu
from inference.engine.loop.freed_memory import release_freed_memory
from tests.engine.helpers import chat_tokens, generate

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
    arrays = [mx.ones((256, 1024)) for _ in range(8)]
    mx.eval(arrays)
    del arrays  # their 8 MB wait in MLX's cache for reuse
    assert mx.get_cache_memory() > 4 * 2**20
    release_freed_memory()
    assert mx.get_cache_memory() > 4 * 2**20
    release_freed_memory(mlx_cache=True)
    assert mx.get_cache_memory() == 0


@pytest.mark.skipif(on_gpu(), reason="on a GPU MLX's cache is kept: device memory is dear to get")
def test_the_engine_on_the_cpu_keeps_no_buffers_once_its_batch_empties(engine):
    """The default model's decode leaves megabytes in MLX's cache (17 MB measured); the
    engine hands them back on the step that empties its batch."""
    run = generate(engine, GenerationRequest(chat_tokens(engine, "Count to five."), max_tokens=8))
    assert run.end.completion_tokens > 0
    past = threading.Event()  # the engine thread past the step that emptied the batch
    engine.between_steps(lambda runner: past.set())
    assert past.wait(30)
    assert mx.get_cache_memory() == 0
