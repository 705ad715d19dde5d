"""Decoder blocks as two native calls per layer, decode and prefill, for the families whose
blocks have Llama's shape: Llama, Qwen2 (q/k/v biases), Qwen3 (q and k head norms), SmolLM3,
Mistral and the other mlx-lm modules whose blocks compute the same thing.

On the CPU a decode step of the default model was two thirds framework: some 20 MLX
operations per layer, each a graph node to build, schedule, allocate for and free, around
matmuls that take a third of the time. A block whose projections all run on the quantized
matmul kernel gets this class instead of mlx-lm's: its calls run the extension's
`decode_qkv` (norm, q/k/v with their biases, the head norms, RoPE) and `decode_rest`
(attention, o, residual, norm, MLP, residual), and between the two the cache's own
`update_and_fetch`, so every plain cache kind keeps mlx-lm's logic. Each query is computed
as a one-token step there computes it, so a pass that verifies drafts changes no logit.
Prefill takes the same calls: on x86 MLX's CPU softmax and SiLU run a scalar exp through
libm's fmaf, a third of a prefill, where the native ones are vectorized (2.8x the prefill
of a 540-token prompt). A call without a cache, over a quantized KV cache, or with an
adapter on a projection runs mlx-lm's block unchanged, or, inside a verifying pass, that
block with its attention computed query by query (exact_attention.py).

Which blocks: read from the block's public structure, never its class (`describe`): an
input and a post-attention RMSNorm, attention of q/k/v/o projections with an optional
additive bias on q, k and v, optional RMSNorm head norms on q and k, a plain RoPE over the
whole head, and a gate/up/down MLP; anything more (extra norms, sliding windows, a fused
projection) is another shape. Since a structure cannot say what the block's code does
with it (the MLP's activation, the residuals' order), each block is checked once at load:
a two-token call through the native path against the block's own (`_agrees`).

The keys and values are cached as float16 by default, as llama.cpp caches them: attention
reads the whole cache on every step, as many bytes as the weights at a thousand tokens in
float32. Prefill through mlx-lm's block stores them the same way (`HalfWrites`), and a
cache that already holds float32 (a prompt cache saved by float32 layers) stays float32.
"""

from __future__ import annotations

from dataclasses import dataclass
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

    def __init__(self, block: nn.Module, projections: tuple[nn.Module, ...], shape: Shape):
        attention = block["self_attn"]
        self.projections = projections
        qkv, rest = projections[:3], projections[3:]
        self.qkv_weights = [block["input_layernorm"].weight] + _weights(qkv)
        if shape.qkv_bias:
            self.qkv_weights += [m["bias"] for m in qkv]
        if shape.qk_norm_eps:
            self.qkv_weights += [attention["q_norm"].weight, attention["k_norm"].weight]
        self.qkv_quant = _quant(qkv)
        self.rest_weights = [block["post_attention_layernorm"].weight] + _weights(rest)
        self.rest_quant = _quant(rest)
        rope = attention["rope"]
        self.shape = (attention.n_heads, attention.n_kv_heads, rope.dims)
        self.rope = (rope.base, rope.scale, rope.traditional)
        self.eps = (block["input_layernorm"].eps, block["post_attention_layernorm"].eps)
        self.scale = attention.scale
        self.options = {"qkv_bias": shape.qkv_bias, "qk_norm_eps": shape.qk_norm_eps}


@dataclass(frozen=True)
class Shape:
    """What the native calls must know of a block beyond Llama's: q/k/v biases (Qwen2), and
    the epsilon of q and k head norms (Qwen3; 0 where there are none)."""

    qkv_bias: bool = False
    qk_norm_eps: float = 0.0


def _weights(modules) -> list[mx.array]:
    return [array for m in modules for array in (m["weight"], m["scales"], m["biases"])]


def _quant(modules) -> list[int]:
    return [value for m in modules for value in (m.group_size, m.bits)]


def _projections(block: nn.Module) -> tuple[nn.Module, ...]:
    # Item lookups: a Module is a dict, and its __getattr__ costs a Python call each, on
    # every layer of every step.
    attention, mlp = block["self_attn"], block["mlp"]
    return tuple(attention[n] for n in ATTENTION + REST) + tuple(mlp[n] for n in MLP)


BLOCK_PARTS = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm"}
ATTENTION_PARTS = {*ATTENTION, *REST, "rope"}
HEAD_NORMS = {"q_norm", "k_norm"}


def describe(block: nn.Module, *, on_kernel: bool = True) -> Shape | None:
    """The block's shape where the native calls take it, read from its public structure;
    None where they do not (the block then runs as mlx-lm's). `on_kernel`: its projections
    must already run on the quantized matmul kernel (False: the shape alone, as a model
    quantized for serving would have it)."""
    if not isinstance(block, nn.Module) or set(block.children()) != BLOCK_PARTS:
        return None
    attention, mlp = block["self_attn"], block["mlp"]
    parts = set(attention.children())
    if parts not in (ATTENTION_PARTS, ATTENTION_PARTS | HEAD_NORMS) or set(mlp.children()) != set(
        MLP
    ):
        return None
    norms = [block["input_layernorm"], block["post_attention_layernorm"]]
    if not all(type(n) is nn.RMSNorm and n.weight.dtype == mx.float32 for n in norms):
        return None
    projections = _projections(block)
    kinds = (KernelLinear,) if on_kernel else (KernelLinear, nn.Linear, nn.QuantizedLinear)
    if not all(type(m) in kinds for m in projections):
        return None
    biased = ["bias" in m for m in projections]
    if any(biased[3:]) or len(set(biased[:3])) != 1:
        return None
    rope = attention["rope"]
    heads = getattr(attention, "n_heads", None)
    if not isinstance(heads, int) or not isinstance(getattr(attention, "n_kv_heads", None), int):
        return None
    head_dim = attention["q_proj"]["weight"].shape[0] // heads  # the weight's rows: outputs
    if type(rope) is not nn.RoPE or rope.dims != head_dim:
        return None
    qk_norm_eps = 0.0
    if parts >= HEAD_NORMS:
        heads = [attention["q_norm"], attention["k_norm"]]
        if not all(type(n) is nn.RMSNorm and n.weight.shape == (head_dim,) for n in heads):
            return None
        if heads[0].eps != heads[1].eps:
            return None
        qk_norm_eps = float(heads[0].eps)
    return Shape(qkv_bias=biased[0], qk_norm_eps=qk_norm_eps)


def eligible(block: nn.Module) -> bool:
    """Whether the native calls take this block's shape (describe)."""
    return describe(block) is not None


class FusedLayer:
    """Mixin over an mlx-lm block class: its calls over a plain cache on the extension.

    Installed by swapping an instance's class for `fused_class(its class)`, so that the
    parameter tree (and with it loading, adapters and the prompt cache's identity) stays
    mlx-lm's own, and `super()` is the block's own code.
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
            **plan.options,
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
        shape = describe(self)
        plan = _Plan(self, projections, shape) if shape is not None else None
        self._mlxlab_plan = plan
        return plan


_FUSED: dict[type, type] = {}


def fused_class(block_class: type) -> type:
    """The fused class of an mlx-lm block class (one per family, made on first use)."""
    if issubclass(block_class, FusedLayer):
        return block_class
    if block_class not in _FUSED:
        name = f"Fused{block_class.__name__}"
        _FUSED[block_class] = type(name, (FusedLayer, block_class), {"__module__": __name__})
    return _FUSED[block_class]


def own_class(block: nn.Module) -> type:
    """The mlx-lm class a fused block was made from (its own, when not fused)."""
    kind = type(block)
    return kind.__mro__[2] if issubclass(kind, FusedLayer) else kind


FusedBlock = fused_class(llama.TransformerBlock)


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
    """Give every block of `model` the native calls take, and that computes there what it
    computes itself, the fused decode step, its KV cache float16 or float32; how many."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, list):  # a module of its own, not mlx-lm's list of blocks
        return 0
    count = 0
    for block in layers:
        if not eligible(block):
            continue
        mine, own = type(block), own_class(block)
        block.__class__ = fused_class(own)
        block._mlxlab_module = kernel
        block._mlxlab_kv_float16 = kv_float16
        if _agrees(block, own):
            count += 1
        else:
            block.__class__ = mine
    return count


def _agrees(block: nn.Module, own: type) -> bool:
    """Whether two tokens through the native calls give what the block's own code gives
    (a structure cannot say what its code does: the activation, the residuals' order)."""
    width = block["input_layernorm"].weight.shape[0]
    x = mx.random.normal((1, 2, width), key=mx.random.key(0))
    try:
        fused = block(x, "causal", KVCache())
        theirs = own.__call__(
            block, x, "causal", HalfWrites(KVCache()) if block._mlxlab_kv_float16 else KVCache()
        )
        mx.eval(fused, theirs)
    except Exception:
        return False
    scale = 1.0 + mx.abs(theirs).max().item()
    return mx.abs(fused - theirs).max().item() <= 1e-3 * scale
