"""Fused decode layers: each decode step of a Llama block as two native calls."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import llama
from mlx_lm.models.cache import KVCache, QuantizedKVCache

from inference.engine import load_model
from inference.engine.acceleration import quantized_kernel as qk
from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path
from inference.engine.acceleration.exact_attention import exact_attention
from inference.engine.acceleration.fused_decode import FusedBlock, HalfWrites
from inference.engine.acceleration.layer_shape import Shape, Unfit, describe
from inference.engine.caching.identity import model_identity
from inference.engine.kv.rows import RowsKVCache, RowsQuantizedKVCache

from .llama_blocks import mlx_lm_blocks

PROMPTS = [
    "What is the capital of France?",
    "Write one line about the sea, please, in the style of an old sailor.",
    "Name a color.",
]


@pytest.fixture(scope="module")
def loaded(model_folder):
    loaded = load_model(model_folder, fast_path=FastPathOptions(weights="kernel"))
    if not qk.fused_decode_enabled():
        pytest.skip("the fused decode layers need an x86 build of the kernel (AVX2 or AVX-512)")
    return loaded


def _prompts(loaded) -> list[list[int]]:
    template = loaded.tokenizer.apply_chat_template
    return [template([{"role": "user", "content": p}], add_generation_prompt=True) for p in PROMPTS]


def _decode(model, prompts: list[list[int]], steps: int, make_cache, half=False) -> list[mx.array]:
    """Each decode step's logits for left-padded prompts, greedy tokens fed back; `half`:
    keys and values stored as float16 whatever blocks run (as the fused layers store them)."""
    width = max(len(p) for p in prompts)
    padding = [width - len(p) for p in prompts]
    cache = [make_cache(padding) for _ in model.model.layers]
    if half:
        cache = [HalfWrites(c) for c in cache]
    logits = model(
        mx.array([[0] * pad + p for pad, p in zip(padding, prompts, strict=True)]), cache=cache
    )
    token = mx.argmax(logits[:, -1:, :], axis=-1)
    steps_logits = []
    for _ in range(steps):
        logits = model(token, cache=cache)[:, -1, :]
        mx.eval(logits)
        steps_logits.append(logits)
        token = mx.argmax(logits, axis=-1)[:, None]
    return steps_logits


def _assert_same(fused: list[mx.array], reference: list[mx.array]) -> None:
    for got, want in zip(fused, reference, strict=True):
        error = mx.abs(got - want).max().item()
        assert error <= 1e-3 * (1.0 + mx.abs(want).max().item()), error
        assert mx.array_equal(mx.argmax(got, axis=-1), mx.argmax(want, axis=-1))


def test_every_layer_is_fused_on_the_kernel(loaded):
    report = loaded.fast_path
    assert report.path == "kernel" and report.layers_fused == 30, report.reason
    assert "30 decoder layers run as two native calls each (decode and prefill)" in report.reason
    assert all(type(b) is FusedBlock for b in loaded.model.model.layers)


def test_a_padded_batch_decodes_as_mlx_lms_blocks(loaded):
    # Left padding: the cache's boolean mask goes into the native attention.
    prompts = _prompts(loaded)
    fused = _decode(loaded.model, prompts, 6, RowsKVCache)
    with mlx_lm_blocks(loaded.model, FusedBlock):
        reference = _decode(loaded.model, prompts, 6, RowsKVCache, half=True)
    _assert_same(fused, reference)


def test_an_unpadded_batch_and_a_single_row_decode_as_mlx_lms_blocks(loaded):
    prompts = [p[:20] for p in _prompts(loaded)]
    single = lambda padding: KVCache()  # noqa: E731 (one row, mlx-lm's plain cache)
    for rows, make_cache in ((prompts, RowsKVCache), (prompts[:1], single)):
        fused = _decode(loaded.model, rows, 4, make_cache)
        with mlx_lm_blocks(loaded.model, FusedBlock):
            reference = _decode(loaded.model, rows, 4, make_cache, half=True)
        _assert_same(fused, reference)


def test_keys_and_values_are_cached_as_float16_and_stay_near_float32(loaded):
    # Half the bytes for attention to read; the logits move by little against a float32
    # cache, and the greedy tokens not at all on these prompts.
    assert loaded.fast_path.kv_cache == "float16"
    assert "keys and values cached as float16" in loaded.fast_path.reason
    assert model_identity(loaded)["kv_cache"] == "float16"  # a saved state says its type
    prompts = _prompts(loaded)
    caches = []

    def make_cache(padding):
        caches.append(RowsKVCache(padding))
        return caches[-1]

    half = _decode(loaded.model, prompts, 6, make_cache)
    assert {c.keys.dtype for c in caches} == {c.values.dtype for c in caches} == {mx.float16}
    layers = loaded.model.model.layers
    try:
        for block in layers:
            block._mlxlab_kv_float16 = False
        caches.clear()
        full = _decode(loaded.model, prompts, 6, make_cache)
        assert {c.keys.dtype for c in caches} == {mx.float32}
    finally:
        for block in layers:
            block._mlxlab_kv_float16 = True
    for got, want in zip(half, full, strict=True):
        assert mx.abs(got - want).max().item() <= 0.01 * (1.0 + mx.abs(want).max().item())
        assert mx.array_equal(mx.argmax(got, axis=-1), mx.argmax(want, axis=-1))


def test_a_cache_that_holds_float32_keeps_float32(loaded):
    # A prompt cache saved by float32 layers: decode steps write the type it holds.
    prompt = _prompts(loaded)[:1]
    cache = [KVCache() for _ in loaded.model.model.layers]
    with mlx_lm_blocks(loaded.model, FusedBlock):
        loaded.model(mx.array(prompt), cache=cache)
    assert cache[0].keys.dtype == mx.float32
    logits = loaded.model(mx.array([[42]]), cache=cache)
    mx.eval(logits)
    assert {c.keys.dtype for c in cache} == {mx.float32}
    assert not mx.isnan(logits).any().item()


@pytest.mark.parametrize(
    "make_cache",
    [RowsKVCache, lambda padding: RowsQuantizedKVCache(padding, group_size=64, bits=8)],
    ids=["plain rows: the native calls", "quantized rows: mlx-lm's block, query by query"],
)
def test_a_verifying_pass_computes_each_position_as_a_one_token_step(loaded, make_cache):
    # Speculative decoding's exactness: 4 positions at once (inside exact_attention, as a
    # verifying pass runs) give bit for bit the logits of 4 one-token steps, padding too.
    prompts = _prompts(loaded)[:2]
    width = max(len(p) for p in prompts)
    padding = [width - len(p) for p in prompts]
    batch = mx.array([[0] * pad + p for pad, p in zip(padding, prompts, strict=True)])
    drafts = mx.array([[11, 12, 13, 14], [21, 22, 23, 24]])
    results = []
    for at_once in (True, False):
        cache = [make_cache(padding) for _ in loaded.model.model.layers]
        loaded.model(batch, cache=cache)
        if at_once:
            with exact_attention():
                results.append(loaded.model(drafts, cache=cache))
        else:
            steps = [loaded.model(drafts[:, i : i + 1], cache=cache) for i in range(4)]
            results.append(mx.concatenate(steps, axis=1))
    assert mx.array_equal(results[0], results[1])


def _prefill(model, prompts: list[list[int]], make_cache, half=False):
    """The last position's logits of left-padded prompts, and the caches they filled."""
    width = max(len(p) for p in prompts)
    padding = [width - len(p) for p in prompts]
    cache = [make_cache(padding) for _ in model.model.layers]
    tokens = mx.array([[0] * pad + p for pad, p in zip(padding, prompts, strict=True)])
    logits = model(tokens, cache=[HalfWrites(c) for c in cache] if half else cache)[:, -1, :]
    mx.eval(logits, [c.state for c in cache])
    return logits, cache


class _CountingKernel:
    """The extension, noting how many tokens each decode_qkv call takes."""

    def __init__(self, kernel):
        self.kernel, self.lengths = kernel, []

    def decode_qkv(self, x, *args, **kwargs):
        self.lengths.append(x.shape[1])
        return self.kernel.decode_qkv(x, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def test_a_prefill_runs_the_native_calls_and_fills_the_cache_as_mlx_lms_blocks(loaded, monkeypatch):
    # Prefill takes the native calls too (MLX's CPU softmax and SiLU run a scalar exp on
    # x86): a padded batch, and one row longer than the rows whose buffers the calls keep.
    counting = _CountingKernel(qk.kernel_module())
    for block in loaded.model.model.layers:
        monkeypatch.setattr(block, "_mlxlab_module", counting)
    prompts = _prompts(loaded)
    long = [sum(prompts, [])[:150]]
    single = lambda padding: KVCache()  # noqa: E731
    for rows, make_cache in ((prompts, RowsKVCache), (long, single)):
        counting.lengths.clear()
        logits, cache = _prefill(loaded.model, rows, make_cache)
        assert counting.lengths == [max(len(p) for p in rows)] * 30
        with mlx_lm_blocks(loaded.model, FusedBlock):
            want_logits, want_cache = _prefill(loaded.model, rows, make_cache, half=True)
        _assert_same([logits], [want_logits])
        width = max(len(p) for p in rows)
        for got, want in zip(cache, want_cache, strict=True):
            assert got.keys.dtype == want.keys.dtype == mx.float16
            for a, b in ((got.keys, want.keys), (got.values, want.values)):
                for row, prompt in enumerate(rows):  # a padding position is never attended
                    x, y = (
                        t[row, :, width - len(prompt) : width].astype(mx.float32) for t in (a, b)
                    )
                    assert mx.abs(x - y).max().item() <= 1e-2 * (1.0 + mx.abs(y).max().item())
    # The long row's first decode steps after it, on the buffers the prefill freed.
    steps = _decode(loaded.model, long, 3, single)
    with mlx_lm_blocks(loaded.model, FusedBlock):
        reference = _decode(loaded.model, long, 3, single, half=True)
    _assert_same(steps, reference)


def test_a_quantized_kv_cache_keeps_mlx_lms_block(loaded):
    # Its update_and_fetch returns packed tuples: the block's own attention reads them.
    prompts = _prompts(loaded)[:1]
    make_cache = lambda padding: QuantizedKVCache(group_size=64, bits=8)  # noqa: E731
    fused = _decode(loaded.model, prompts, 3, make_cache)
    with mlx_lm_blocks(loaded.model, FusedBlock):
        reference = _decode(loaded.model, prompts, 3, make_cache)
    for got, want in zip(fused, reference, strict=True):
        assert mx.array_equal(got, want)


def test_a_projection_that_is_not_on_the_kernel_turns_the_block_back(loaded):
    block = loaded.model.model.layers[3]
    kernel_q = block.self_attn.q_proj
    assert isinstance(describe(block), Shape) and block._plan() is not None
    block.self_attn.q_proj = nn.Linear(576, 576, bias=False)  # as an adapter slot would
    try:
        assert isinstance(describe(block), Unfit) and block._plan() is None
    finally:
        block.self_attn.q_proj = kernel_q
    assert block._plan() is not None


def test_turned_off_no_layer_is_fused(model_folder, monkeypatch):
    monkeypatch.setenv("MLXLAB_FUSED_DECODE", "0")
    model = load_model(model_folder, fast_path=FastPathOptions(enabled=False)).model
    report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    assert report.path == "kernel" and report.layers_fused == 0
    assert all(type(b) is llama.TransformerBlock for b in model.model.layers)


def test_the_native_calls_refuse_shapes_they_do_not_compute(loaded):
    kernel = qk.kernel_module()
    attention = loaded.model.model.layers[0].self_attn
    weights = [loaded.model.model.layers[0].input_layernorm.weight]
    for name in ("q_proj", "k_proj", "v_proj"):
        layer = getattr(attention, name)
        weights += [layer["weight"], layer["scales"], layer["biases"]]
    with pytest.raises(ValueError, match=r"x must be \(B, L, D\)"):
        kernel.decode_qkv(
            mx.zeros((576,)), mx.array([0]), weights, [32, 4] * 3, 9, 3, 64, 1e-5, 1e5, 1.0, True
        )
    with pytest.raises(ValueError, match="group size 32/64/128 and 4/8 bits"):
        kernel.decode_qkv(
            mx.zeros((1, 1, 576)),
            mx.array([0]),
            weights,
            [32, 3] * 3,
            9,
            3,
            64,
            1e-5,
            1e5,
            1.0,
            True,
        )


def test_a_float32_kv_cache_when_asked(model_folder, monkeypatch):
    monkeypatch.setenv("MLXLAB_FUSED_KV_FLOAT16", "0")
    model = load_model(model_folder, fast_path=FastPathOptions(enabled=False)).model
    report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    assert report.layers_fused == 30 and report.kv_cache == "float32", report.reason
    cache = [KVCache() for _ in model.model.layers]
    model(mx.array([[1, 2, 3]]), cache=cache)
    mx.eval(model(mx.array([[4]]), cache=cache))
    assert {c.keys.dtype for c in cache} == {mx.float32}
