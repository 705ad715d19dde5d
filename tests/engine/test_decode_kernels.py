"""decode_kernels.py: the one-token decode path of fused layers, with the
kernels' MLX-operation reference on the CPU, and the CUDA kernels where a GPU is."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import make_prompt_cache

from inference.engine.acceleration import decode_kernels
from inference.engine.acceleration.decode_kernels import Reference
from inference.engine.acceleration.fused_projections import FusedProjectionsBlock, fuse_projections
from inference.engine.kv.rows import RowsKVCache

from .llama_blocks import greedy, mlx_lm_blocks, step_logits, tiny_llama

PROMPTS = [[3, 9, 27, 81, 243, 5, 15], [4, 16, 64], [7, 49, 87, 100], [2, 4, 8, 16]]
CUDA = getattr(mx, "cuda", None) is not None and mx.cuda.is_available()


@pytest.fixture
def tiny():
    return tiny_llama(7)


@pytest.fixture
def reference(monkeypatch):
    monkeypatch.setenv(decode_kernels.VARIABLE, "reference")


def test_the_switch(monkeypatch):
    monkeypatch.delenv(decode_kernels.VARIABLE, raising=False)
    assert decode_kernels.chosen() is None  # off unless asked for (docs/BENCHMARKS.md)
    monkeypatch.setenv(decode_kernels.VARIABLE, "1")
    assert decode_kernels.chosen() is (decode_kernels.CudaQkv if CUDA else None)
    monkeypatch.setenv(decode_kernels.VARIABLE, "all")
    assert decode_kernels.chosen() is (decode_kernels.Cuda if CUDA else None)
    monkeypatch.setenv(decode_kernels.VARIABLE, "qkv")
    assert decode_kernels.chosen() is (decode_kernels.CudaQkv if CUDA else None)
    monkeypatch.setenv(decode_kernels.VARIABLE, "0")
    assert decode_kernels.chosen() is None
    monkeypatch.setenv(decode_kernels.VARIABLE, "reference")
    assert decode_kernels.chosen() is Reference


def test_offsets():
    one = decode_kernels.offsets(17, 4)
    assert one.dtype == mx.int32 and one.tolist() == [17]
    assert decode_kernels.offsets(17, 4) is one  # the layers of a step share it
    rows = mx.array([3, 4, 5, 6])
    assert decode_kernels.offsets(rows, 4) is rows
    assert decode_kernels.offsets(rows.astype(mx.int64), 4).dtype == mx.int32
    assert decode_kernels.offsets(rows, 3) is None  # neither one nor one per row
    assert decode_kernels.offsets(mx.array([1.0]), 1) is None
    assert decode_kernels.offsets(None, 1) is None


@pytest.mark.parametrize("mixed", [True, False], ids=["mixed lengths", "one length"])
def test_greedy_tokens_are_mlx_lms(tiny, reference, mixed):
    prompts = PROMPTS if mixed else [p[:3] for p in PROMPTS]
    with mlx_lm_blocks(tiny, FusedProjectionsBlock):
        expected = greedy(tiny, prompts, 8)
        logits = step_logits(tiny)
    assert fuse_projections(tiny) == 2
    assert all(b._mlxlab_kernels[0] is Reference for b in tiny.model.layers)
    assert greedy(tiny, prompts, 8) == expected  # RowsKVCache: an offset per row
    assert greedy(tiny, prompts[:1], 8) == [expected[0]]
    assert mx.allclose(step_logits(tiny), logits, atol=1e-5)  # KVCache: an int offset


def test_the_decode_path_runs(tiny, reference, monkeypatch):
    fuse_projections(tiny)
    calls = []
    original = FusedProjectionsBlock._decode

    def counted(self, *args):
        calls.append(args[0].shape)
        return original(self, *args)

    monkeypatch.setattr(FusedProjectionsBlock, "_decode", counted)
    norms = []
    original_norm = Reference.add_norm
    monkeypatch.setattr(Reference, "add_norm", lambda *a: norms.append(1) or original_norm(*a))
    first, second = tiny.model.layers
    assert first._mlxlab_next is second and second._mlxlab_next is None
    cache = make_prompt_cache(tiny)
    tiny(mx.array([[5, 6, 7]]), cache=cache)
    assert calls == [] and norms == []  # prefill: mlx-lm's path
    rms = []
    original_rms = nn.RMSNorm.__call__
    monkeypatch.setattr(
        nn.RMSNorm, "__call__", lambda self, x: rms.append(1) or original_rms(self, x)
    )
    tiny(mx.array([[8]]), cache=cache)
    assert len(calls) == 2  # one-token step: every layer
    assert len(rms) == 2  # the first layer's input norm and the model's last, no other
    # Both layers' norms after attention, and the first's residual add with the second's
    # input norm: the second layer took that norm (nothing left behind).
    assert len(norms) == 3 and second._mlxlab_pre is None
    batch = [RowsKVCache([0, 0]) for _ in tiny.layers]
    tiny(mx.array([[5, 6], [7, 8]]), cache=batch)
    tiny(mx.array([[8], [9]]), cache=batch)
    assert len(calls) == 4


def test_another_rope_keeps_the_plain_path(tiny, reference):
    class ScaledRoPE(nn.RoPE):  # as Llama 3's rope scaling is another class
        pass

    attention = tiny.model.layers[0].self_attn
    attention.rope = ScaledRoPE(attention.rope.dims, base=attention.rope.base)
    fuse_projections(tiny)
    assert tiny.model.layers[0]._mlxlab_kernels is None
    assert tiny.model.layers[1]._mlxlab_kernels is not None


@pytest.mark.skipif(not CUDA, reason="the CUDA kernels need an NVIDIA GPU (mlx[cuda])")
def test_the_cuda_kernels_equal_the_reference():
    p = decode_kernels.Plan.__new__(decode_kernels.Plan)
    p.heads, p.kv_heads, p.dim, p.traditional, p.base, p.scale, p.eps = (
        4,
        2,
        16,
        False,
        10000.0,
        1.0,
        1e-5,
    )
    qkv = mx.random.normal((3, 1, 8 * 16)).astype(mx.bfloat16)
    offset = mx.array([5, 9, 40], dtype=mx.int32)
    got_all = decode_kernels.Cuda.qkv_rope(qkv, offset, p)
    for got, want in zip(got_all, Reference.qkv_rope(qkv, offset, p), strict=True):
        assert mx.allclose(got, want, atol=1e-2)
    x, y = (mx.random.normal((3, 1, 64)).astype(mx.bfloat16) for _ in range(2))
    w = mx.ones((64,), dtype=mx.bfloat16)
    got_all = decode_kernels.Cuda.add_norm(x, y, w, 1e-5)
    for got, want in zip(got_all, Reference.add_norm(x, y, w, 1e-5), strict=True):
        assert mx.allclose(got, want, atol=1e-2)
