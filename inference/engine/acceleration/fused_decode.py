"""Llama blocks as two native calls per layer, decode and prefill.

On the CPU a decode step of the default model was two thirds framework: some 20 MLX
operations per layer, each a graph node to build, schedule, allocate for and free, around
matmuls that take a third of the time. A block whose projections all run on the quantized
matmul kernel gets this class instead of mlx-lm's: its calls run the extension's
`decode_qkv` (norm, q/k/v, RoPE) and `decode_rest` (attention, o, residual, norm, MLP,
residual), and between the two the cache's own `update_and_fetch`, so every plain cache
kind keeps mlx-lm's logic. Each query is computed as a one-token step there computes it,
so a pass that verifies drafts changes no logit. Prefill takes the same calls: on x86
MLX's CPU softmax and SiLU run a scalar exp through libm's fmaf, a third of a prefill,
where the native ones are vectorized (2.8x the prefill of a 540-token prompt). A call
without a cache, over a quantized KV cache, or with an adapter on a projection runs
mlx-lm's block unchanged, or, inside a verifying pass, that block with its attention
computed query by query (exact_attention.py).

The keys and values are cached as float16 by default, as llama.cpp caches them: attention
reads the whole cache on every step, as many bytes as the weights at a thousand tokens in
float32. Prefill through mlx-lm's block stores them the same way (`HalfWrites`), and a
cache that already holds float32 (a prompt cache saved by float32 layers) stays float32.
"""

from __future__ import annotations

from types import ModuleType

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache, RotatingKVCache

from ..kv.rows import RowsKVCache
from .exact_attention import attend_exactly, exact_attention_on
from .quantized_kernel import KernelLinear

ATTENTION = ("q_proj", "k_proj", "v_proj")
REST = ("o_proj",)
MLP = ("gate_proj", "up_proj", "down_proj")
# Caches whose update_and_fetch returns float arrays (a quantized cache returns tuples).
PLAIN_CACHES = (KVCache, RowsKVCache, BatchKVCache, RotatingKVCache)


class _Plan:
    """What one block's native calls take, built once per set of projection modules."""

    def __init__(self, block: llama.TransformerBlock, projections: tuple[nn.Module, ...]):
        attention = block.self_attn
        self.projections = projections
        qkv, rest = projections[:3], projections[3:]
        self.qkv_weights = [block.input_layernorm.weight] + _weights(qkv)
        self.qkv_quant = _quant(qkv)
        self.rest_weights = [block.post_attention_layernorm.weight] + _weights(rest)
        self.rest_quant = _quant(rest)
        rope = attention.rope
        self.shape = (attention.n_heads, attention.n_kv_heads, rope.dims)
        self.rope = (rope.base, rope.scale, rope.traditional)
        self.eps = (block.input_layernorm.eps, block.post_attention_layernorm.eps)
        self.scale = attention.scale


def _weights(modules) -> list[mx.array]:
    return [array for m in modules for array in (m["weight"], m["scales"], m["biases"])]


def _quant(modules) -> list[int]:
    return [value for m in modules for value in (m.group_size, m.bits)]


def _projections(block: llama.TransformerBlock) -> tuple[nn.Module, ...]:
    # Item lookups: a Module is a dict, and its __getattr__ costs a Python call each, on
    # every layer of every step.
    attention, mlp = block["self_attn"], block["mlp"]
    return tuple(attention[n] for n in ATTENTION + REST) + tuple(mlp[n] for n in MLP)


def eligible(block: nn.Module) -> bool:
    """Whether the fused step computes exactly what this block computes (else: its own)."""
    if type(block) not in (llama.TransformerBlock, FusedBlock):
        return False
    attention = block.self_attn
    rope = attention.rope
    return (
        all(type(m) is KernelLinear and "bias" not in m for m in _projections(block))
        and type(rope) is nn.RoPE
        and rope.dims == attention.head_dim
        and block.input_layernorm.weight.dtype == mx.float32
        and block.post_attention_layernorm.weight.dtype == mx.float32
    )


class FusedBlock(llama.TransformerBlock):
    """mlx-lm's Llama block, its calls over a plain cache on the extension.

    Installed by swapping an instance's class, so that the parameter tree (and with it
    loading, adapters and the prompt cache's identity) stays mlx-lm's own.
    """

    _mlxlab_module: ModuleType
    _mlxlab_plan: _Plan | None = None
    _mlxlab_kv_float16: bool = False

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        plan = self._plan()
        plain = isinstance(cache, PLAIN_CACHES)
        if plan is None or not plain or not _usable(mask, x.shape[1]):
            if plain and self._mlxlab_kv_float16:
                cache = HalfWrites(cache)
            if cache is not None and x.shape[1] > 1 and exact_attention_on():
                return self._exactly(x, mask, cache)
            return super().__call__(x, mask, cache)
        kernel = self._mlxlab_module
        offset = cache.offset
        positions = offset if isinstance(offset, mx.array) else mx.array(offset, mx.int32)
        q, k, v = kernel.decode_qkv(
            x,
            positions,
            plan.qkv_weights,
            plan.qkv_quant,
            *plan.shape,
            plan.eps[0],
            *plan.rope,
            kv_float16=_stored_type(cache, self._mlxlab_kv_float16) == mx.float16,
        )
        keys, values = cache.update_and_fetch(k, v)
        if isinstance(mask, str):  # "causal": each query sees the keys up to it, as it does
            mask = None
        return kernel.decode_rest(
            x, q, keys, values, plan.rest_weights, plan.rest_quant, mask, plan.eps[1], plan.scale
        )

    def _exactly(self, x: mx.array, mask, cache) -> mx.array:
        """mlx-lm's block, its attention computed query by query (a verifying pass over
        a cache the native calls do not take: quantized rows, an active adapter)."""
        h = x + attend_exactly(self.self_attn, self.input_layernorm(x), mask, cache)
        return h + self.mlp(self.post_attention_layernorm(h))

    def _plan(self) -> _Plan | None:
        """The plan while the projections are the ones it was built for (an adapter
        swaps them for slots: then mlx-lm's own block runs)."""
        projections = _projections(self)
        plan = self._mlxlab_plan
        if plan is not None and all(
            a is b for a, b in zip(plan.projections, projections, strict=True)
        ):
            return plan
        plan = _Plan(self, projections) if eligible(self) else None
        self._mlxlab_plan = plan
        return plan


def _stored_type(cache, float16: bool) -> mx.Dtype:
    """The type the cache keeps keys in: what it holds already, else the layers' choice."""
    keys = cache.keys
    if keys is not None:
        return keys.dtype
    return mx.float16 if float16 else mx.float32


class HalfWrites:
    """A plain cache whose new keys and values are stored as float16 (or as the float32
    the cache already holds). Everything else is the cache's own; MLX's attention widens
    float16 keys and values to the query's float32, exactly as the native attention does."""

    __slots__ = ("_cache",)

    def __init__(self, cache):
        self._cache = cache

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        stored = _stored_type(self._cache, True)
        return self._cache.update_and_fetch(keys.astype(stored), values.astype(stored))

    def __getattr__(self, name: str):
        return getattr(self._cache, name)


def _usable(mask, length: int) -> bool:
    if mask is None or isinstance(mask, str):
        return True
    if mask.ndim != 4 or mask.shape[2] not in (1, length):
        return False
    return mask.dtype in (mx.bool_, mx.float32)


def fuse_decode_layers(model: nn.Module, kernel: ModuleType, kv_float16: bool = True) -> int:
    """Give every eligible Llama block of `model` the fused decode step, its KV cache float16
    or float32; returns how many."""
    layers = getattr(getattr(model, "model", None), "layers", None) or []
    count = 0
    for block in layers:
        if eligible(block):
            block.__class__ = FusedBlock
            block._mlxlab_module = kernel
            block._mlxlab_kv_float16 = kv_float16
            count += 1
    return count
