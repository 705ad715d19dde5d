"""Decoder blocks as two native calls per layer, decode and prefill, for the families whose
blocks the native layers compute (layer_shape.py): Llama and its kin, Qwen2 and Qwen3,
Gemma 3, OLMo 2, Phi-3, Granite and the other mlx-lm modules whose blocks compute the same.

On the CPU a decode step of the default model was two thirds framework: some 20 MLX
operations per layer, each a graph node to build, schedule, allocate for and free, around
matmuls that take a third of the time. A block whose projections all run on the quantized
matmul kernel gets this class instead of mlx-lm's: its calls run the extension's
`decode_qkv` (norm, q/k/v with their biases, the q and k norms, RoPE) and `decode_rest`
(attention, o, the residuals, norms and MLP), and between the two the cache's own
`update_and_fetch`, so every plain cache kind keeps mlx-lm's logic. A block whose MLP is a
mixture of experts runs the attention half natively (`decode_rest(mlp=False)`: on Granite
MoE's shape that half as MLX operations took 31 of a step's 76 ms, native 14) and then its
own MLP module, whose experts run on the kernel's expert-grouped matmul. Each query is
computed as a one-token step there computes it, so a pass that verifies drafts changes no logit.
Prefill takes the same calls: on x86 MLX's CPU softmax and SiLU run a scalar exp through
libm's fmaf, a third of a prefill, where the native ones are vectorized (2.8x the prefill
of a 540-token prompt). A call without a cache, over a quantized KV cache, or with an
adapter on a projection runs mlx-lm's block unchanged, or, inside a verifying pass, the
block as its Shape says, its attention computed query by query (exact_attention.py).

Which blocks: described from their public structure and the model's config, never their
class (layer_shape.describe). Since a structure cannot say everything a block's code does
with it (the residuals' order), each block is checked once at load: two tokens through the
native path against the block's own code, at the sequence's start and far into it
(`_agrees`).

The keys and values are cached as float16 by default, as llama.cpp caches them: attention
reads the whole cache on every step, as many bytes as the weights at a thousand tokens in
float32. Prefill through mlx-lm's block stores them the same way (`HalfWrites`), and a
cache that already holds float32 (a prompt cache saved by float32 layers) stays float32.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import BatchKVCache, KVCache, RotatingKVCache

from ..kv.rows import RowsKVCache
from .exact_attention import attend_exactly, exact_attention_on
from .layer_shape import ACTIVATIONS, OWN_MLP, Shape, Unfit, describe
from .quantized_kernel import KernelLinear

# Caches whose update_and_fetch returns float arrays (a quantized cache returns tuples).
PLAIN_CACHES = (KVCache, RowsKVCache, BatchKVCache, RotatingKVCache)
# Where the load-time check puts its second pair of tokens: far enough that a wrong
# frequency table moves them visibly.
FAR_POSITION = 6000


class _Plan:
    """What one block's native calls take, built once per set of projection modules."""

    def __init__(self, block: nn.Module, projections: tuple[nn.Module, ...], shape: Shape):
        attention = block["self_attn"]
        norms = [block[name] if name else None for name in shape.norms]
        qkv, rest = projections[: len(shape.qkv)], projections[len(shape.qkv) :]
        self.projections = projections
        self.shape = shape
        self.qkv_weights = [_scaling(norms[0], shape)] if norms[0] else []
        self.qkv_weights += _weights(qkv)
        if shape.qkv_bias:
            self.qkv_weights += [m["bias"] for m in qkv]
        if shape.qk_norm_eps:
            self.qkv_weights += [_scaling(attention[n], shape) for n in ("q_norm", "k_norm")]
        rope = shape.rope
        if rope.periods is not None:  # inverted as MLX's RoPE inverts its freqs
            self.qkv_weights.append(mx.reciprocal(mx.array(rope.periods, mx.float32)))
        self.qkv_quant = _quant(qkv)
        self.heads = (shape.heads, shape.kv_heads, shape.head_dim)
        self.qkv_options = {
            "eps": norms[0].eps if norms[0] else 0.0,
            "rope_base": rope.base,
            "rope_scale": rope.scale,
            "rope_traditional": rope.traditional,
            "qkv_bias": shape.qkv_bias,
            "qk_norm_eps": shape.qk_norm_eps,
            "qk_norm_full": shape.qk_norm_full,
            "rope_dims": rope.dims,
            "rope_mscale": rope.mscale,
            "rope_freqs": rope.periods is not None,
            "input_norm": norms[0] is not None,
            "fused_qkv": len(shape.qkv) == 1,
        }
        own_mlp = shape.mlp == OWN_MLP  # its norms then run with it, in the block's code
        if own_mlp:
            norms[2:] = [None, None]
        after = [n for n in norms[1:] if n is not None]
        self.rest_weights = [_scaling(n, shape) for n in after] + _weights(rest)
        self.rest_quant = _quant(rest)
        self.rest_options = {
            "eps": after[0].eps if after else 0.0,
            "scale": shape.scale,
            "post_attention_norm": norms[1] is not None,
            "pre_norm": norms[2] is not None,
            "post_norm": norms[3] is not None,
            "residual_scale": shape.residual_scale,
            "activation": ACTIVATIONS[shape.activation][0],
            "fused_gate_up": len(shape.mlp) == 2,
            "mlp": not own_mlp,
        }


def _scaling(norm: nn.Module, shape: Shape) -> mx.array:
    """What a norm multiplies by: its weight, or (Gemma's) 1 + weight computed in the
    weight's own type, as its code computes it."""
    return 1.0 + norm.weight if shape.norm_offset else norm.weight


def _weights(modules) -> list[mx.array]:
    return [array for m in modules for array in (m["weight"], m["scales"], m["biases"])]


def _quant(modules) -> list[int]:
    return [value for m in modules for value in (m.group_size, m.bits)]


def _projections(block: nn.Module, shape: Shape) -> tuple[nn.Module, ...]:
    # Item lookups: a Module is a dict, and its __getattr__ costs a Python call each, on
    # every layer of every step.
    return tuple(block[part][name] for part, name in shape.projections)


class FusedLayer:
    """Mixin over an mlx-lm block class: its calls over a plain cache on the extension.

    Installed by swapping an instance's class for `fused_class(its class)`, so that the
    parameter tree (and with it loading, adapters and the prompt cache's identity) stays
    mlx-lm's own, and `super()` is the block's own code.
    """

    _mlxlab_module: ModuleType
    _mlxlab_shape: Shape  # described at load
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
            *plan.heads,
            kv_float16=_stored_type(cache, self._mlxlab_kv_float16) == mx.float16,
            **plan.qkv_options,
        )
        keys, values = cache.update_and_fetch(k, v)
        if isinstance(mask, str):  # "causal": each query sees the keys up to it, as it does
            mask = None
        h = kernel.decode_rest(
            x, q, keys, values, plan.rest_weights, plan.rest_quant, mask, **plan.rest_options
        )
        return h if plan.rest_options["mlp"] else self._mlp_branch(h)

    def _mlp_branch(self, h: mx.array) -> mx.array:
        """h plus the MLP's branch through the block's own modules: its MLP (a mixture of
        experts, or any in a verifying pass) with the norms around it."""
        shape = self._mlxlab_shape
        before, after = (self[name] if name else None for name in shape.norms[2:])
        r = self[shape.mlp_part](before(h) if before else h)
        return h + _scaled(after(r) if after else r, shape.residual_scale)

    def _exactly(self, x: mx.array, mask, cache) -> mx.array:
        """The block as its Shape says, its attention computed query by query (a verifying
        pass over a cache the native calls do not take: quantized rows, an active adapter;
        the projections are then the block's own modules, adapters included)."""
        shape = self._mlxlab_shape
        before, after = (self[name] if name else None for name in shape.norms[:2])
        r = attend_exactly(self["self_attn"], before(x) if before else x, mask, cache, shape)
        return self._mlp_branch(x + _scaled(after(r) if after else r, shape.residual_scale))

    def _plan(self) -> _Plan | None:
        """The plan while the projections are the ones it was built for, or new ones on the
        kernel; None while an adapter has swapped them for its slots (then mlx-lm's own
        block runs)."""
        plan = self._mlxlab_plan
        projections = _projections(self, self._mlxlab_shape)
        if plan is not None and all(map(operator.is_, plan.projections, projections)):
            return plan
        on_kernel = all(type(m) is KernelLinear for m in projections)
        plan = _Plan(self, projections, self._mlxlab_shape) if on_kernel else None
        self._mlxlab_plan = plan
        return plan


def _scaled(x: mx.array, scale: float) -> mx.array:
    return x if scale == 1.0 else x * scale


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


FusedBlock = fused_class(llama.TransformerBlock)  # Llama's, for the tests


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


@dataclass(frozen=True)
class Fusion:
    """How many of a model's blocks run fused, what their shape adds to Llama's, and why
    the others do not (None when every block does)."""

    layers: int
    extras: tuple[str, ...] = ()
    why_not: str | None = None


def fuse_decode_layers(model: nn.Module, kernel: ModuleType, kv_float16: bool = True) -> Fusion:
    """Give every block of `model` the native layers compute, and that computes there what
    it computes itself, the fused calls, its KV cache float16 or float32."""
    layers = getattr(model, "layers", None)  # mlx-lm's own property (its caches read it)
    if not isinstance(layers, list):
        return Fusion(0, why_not="the model's layers are not a list of blocks")
    config = _text_config(model)
    count, extras, why_not = 0, set(), None
    for block in layers:
        shape = describe(block, config)
        if isinstance(shape, Unfit):
            why_not = why_not or shape.reason
            continue
        mine, own = type(block), own_class(block)
        block.__class__ = fused_class(own)
        block._mlxlab_module = kernel
        block._mlxlab_kv_float16 = kv_float16
        block._mlxlab_shape = shape
        block._mlxlab_plan = None
        if _agrees(block, own):
            count += 1
            extras.update(shape.extras)
        else:
            block.__class__ = mine
            why_not = why_not or "a block whose code computes other than its shape says"
    return Fusion(count, tuple(sorted(extras)), why_not)


def _text_config(model: nn.Module):
    """The model's arguments, its text model's where it wraps one (a vision-language
    model's), as an object: what a scaled RoPE is computed from."""
    args = getattr(getattr(model, "language_model", model), "args", None)
    text = getattr(args, "text_config", None)
    if isinstance(text, dict) and getattr(args, "rope_theta", None) is None:
        return SimpleNamespace(**text)
    return args


class _Positioned(KVCache):
    """A cache at `offset` that keeps nothing: the load check's tokens far into a sequence
    without the keys before them."""

    def __init__(self, offset: int):
        super().__init__()
        self.offset = offset

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        self.offset += keys.shape[2]
        return keys, values


def _agrees(block: nn.Module, own: type) -> bool:
    """Whether two tokens through the native calls give what the block's own code gives,
    at the start of a sequence and far into it (a structure cannot say everything its code
    does: the residuals' order; a RoPE table's error grows with the position)."""
    width = block[next(name for name in block._mlxlab_shape.norms if name)]["weight"].shape[0]
    x = mx.random.normal((1, 2, width), key=mx.random.key(0))
    for offset in (0, FAR_POSITION):
        try:
            fused = block(x, "causal", _Positioned(offset))
            cache = _Positioned(offset)
            theirs = own.__call__(
                block, x, "causal", HalfWrites(cache) if block._mlxlab_kv_float16 else cache
            )
            mx.eval(fused, theirs)
        except Exception:
            return False
        scale = 1.0 + mx.abs(theirs).max().item()
        if mx.abs(fused - theirs).max().item() > 1e-3 * scale:
            return False
    return True
