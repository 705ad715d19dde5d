"""On a GPU, each Llama layer's q, k and v projections as one matmul, and gate and up as
another.

MLX's CUDA backend spends host time on every kernel of a step (it records each into a
CUDA graph, and at two rows and more captures each cuBLAS matmul into a child graph),
and on an H200 that host work, not the device, bounds a decode step of a 1B model: 276
kernels, 1.46 ms of them on the device, 3.4 ms a step ("Where a decode step's time goes"
in docs/BENCHMARKS.md's history: git show 02df74b:docs/BENCHMARKS.md). Fusing the
projections takes 7 matmuls a layer to 4: 48 fewer kernels a step, and the fused
matrix-vector products also ran faster on the device (the small k and v ones were the
least efficient).

The fused weights are the concatenation of mlx-lm's, and each projection's own weight
becomes a view into it, so the model holds the weights once and its parameter tree stays
mlx-lm's. Quantized projections fuse the same way (packed weights, scales and biases: each
row's groups are its own) where the fused ones share one quantization, and their biases
(Qwen2's q, k and v) into one where each has one. Projections that are neither (mixed
quantizations or biases, an adapter slot with an active adapter) run mlx-lm's block; a weight replaced since (a reload, an update) is fused again on the next
call. With MLXLAB_DECODE_KERNELS set (off by default),
their one-token decode steps also run decode_kernels.py's custom CUDA kernels.
"""

from __future__ import annotations

import logging

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.activations import swiglu
from mlx_lm.models.base import scaled_dot_product_attention

from labsettings import engine_settings

from . import decode_kernels
from .adapters import AdapterSlot

log = logging.getLogger(__name__)

VARIABLE = "MLXLAB_FUSED_PROJECTIONS"  # on (default): on a GPU; off: never; force: any device
ATTENTION = ("q_proj", "k_proj", "v_proj")
MLP = ("gate_proj", "up_proj")


def wanted(on_gpu: bool) -> bool:
    """Whether loaded models get fused projections (MLXLAB_FUSED_PROJECTIONS)."""
    mode = engine_settings.fused_projections
    return mode == "force" or (on_gpu and mode == "on")


def _base(layer: nn.Module) -> nn.Module | None:
    """The Linear (plain or affine-quantized, with or without a bias) under a layer, or
    None where mlx-lm's block must run."""
    if type(layer) is AdapterSlot:
        if layer.active:
            return None
        layer = layer.base
    if layer["weight"].ndim != 2:
        return None
    if type(layer) is nn.Linear:
        return layer
    if type(layer) is nn.QuantizedLinear and getattr(layer, "mode", "affine") == "affine":
        return layer
    return None


def _quantization(layer: nn.Module) -> tuple[int, int] | None:
    """(group size, bits) of a quantized layer, None for a plain one."""
    return (layer.group_size, layer.bits) if type(layer) is nn.QuantizedLinear else None


class Projection:
    """One fused matmul's weight (plain, or packed with its scales and biases) and its
    layers' biases, where they have them (Qwen2's q, k and v)."""

    def __init__(
        self,
        arrays: tuple[mx.array, ...],
        quantization: tuple[int, int] | None,
        bias: mx.array | None = None,
    ):
        self.arrays, self.quantization, self.bias = arrays, quantization, bias

    @property
    def weight(self) -> mx.array:
        return self.arrays[0]

    def __call__(self, x: mx.array) -> mx.array:
        """As MLX's Linear and QuantizedLinear compute it, the bias included."""
        if self.quantization is None:
            if self.bias is not None:
                return mx.addmm(self.bias, x, self.arrays[0].T)
            return x @ self.arrays[0].T
        group_size, bits = self.quantization
        out = mx.quantized_matmul(x, *self.arrays, transpose=True, group_size=group_size, bits=bits)
        return out if self.bias is None else out + self.bias


def _keys(layer: nn.Module) -> tuple[str, ...]:
    keys = ("weight", "scales", "biases") if type(layer) is nn.QuantizedLinear else ("weight",)
    return (*keys, "bias") if "bias" in layer else keys


def _sources(block: nn.Module) -> list[nn.Module | None]:
    # Item lookups: a Module's __getattr__ is a Python call, on every layer of every step.
    attention, mlp = block.get("self_attn"), block.get("mlp")
    if not isinstance(attention, nn.Module) or not isinstance(mlp, nn.Module):
        return [None]
    parts = [attention.get(name) for name in ATTENTION] + [mlp.get(name) for name in MLP]
    return [_base(part) if isinstance(part, nn.Module) else None for part in parts]


def eligible(block: nn.Module) -> bool:
    """Whether the fused step computes what this block computes (mlx-lm's Llama block)."""
    if type(block) not in (llama.TransformerBlock, FusedProjectionsBlock):
        return False
    return type(block.mlp) is llama.MLP and type(block.self_attn) is llama.Attention


def _fusable(layers: list[nn.Module]) -> bool:
    """Whether the layers are plain or quantized alike, each biased or none: one matmul
    computes all of them."""
    first = layers[0]
    return all(
        _quantization(layer) == _quantization(first) and ("bias" in layer) == ("bias" in first)
        for layer in layers
    )


def _fuse(layers: list[nn.Module]) -> tuple[tuple[mx.array, ...], Projection]:
    """One weight of the layers' rows, each layer's arrays made views into it."""
    quantization = _quantization(layers[0])
    fused = []
    for key in _keys(layers[0]):
        whole = mx.concatenate([layer[key] for layer in layers])
        start = 0
        for layer in layers:
            rows = layer[key].shape[0]
            setattr(layer, key, whole[start : start + rows])
            start += rows
        fused.append(whole)
    views = _arrays(layers)
    mx.eval(fused, views)
    bias = fused.pop() if "bias" in layers[0] else None
    return views, Projection(tuple(fused), quantization, bias)


def _arrays(layers: list[nn.Module]) -> tuple[mx.array, ...]:
    return tuple(layer[key] for layer in layers for key in _keys(layer))


class FusedProjectionsBlock(llama.TransformerBlock):
    """mlx-lm's Llama block with fused q/k/v and gate/up matmuls.

    Installed by swapping an instance's class: the parameter tree (loading, adapters, the
    prompt cache's identity) stays mlx-lm's own.
    """

    _mlxlab_fused: tuple[tuple[mx.array, ...], Projection, Projection] | None = None
    # (kernels, plan) for one-token steps (decode_kernels.py), or None: set at fusing.
    _mlxlab_kernels: tuple[type, decode_kernels.Plan] | None = None
    # The next layer when it decodes with the kernels too: this layer's last residual add
    # and that layer's input norm run as one kernel, its result left in the next layer's
    # _mlxlab_pre as (this layer's output, its norm), taken only for that very array.
    _mlxlab_next: FusedProjectionsBlock | None = None
    _mlxlab_pre: tuple[mx.array, mx.array] | None = None

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        fused = self._fused()
        if fused is None:
            return super().__call__(x, mask, cache)
        qkv, gate_up = fused
        kernels, pre = self._mlxlab_kernels, self._mlxlab_pre
        if pre is not None:
            object.__setattr__(self, "_mlxlab_pre", None)
        if kernels is not None and cache is not None and x.shape[1] == 1:
            offset = decode_kernels.offsets(cache.offset, x.shape[0])
            if offset is not None and x.dtype in decode_kernels.DTYPES:
                normed = pre[1] if pre is not None and pre[0] is x else None
                return self._decode(x, normed, mask, cache, offset, qkv, gate_up, *kernels)
        h = x + _attention(self["self_attn"], self["input_layernorm"](x), qkv, mask, cache)
        gate, up = mx.split(gate_up(self["post_attention_layernorm"](h)), 2, axis=-1)
        return h + self["mlp"]["down_proj"](swiglu(gate, up))

    def _decode(self, x, normed, mask, cache, offset, qkv, gate_up, kernels, plan) -> mx.array:
        """A one-token step with decode_kernels' two kernels: what __call__ computes.
        `normed`: this layer's input norm of `x` if the layer before computed it."""
        attention = self["self_attn"]
        if normed is None:
            normed = self["input_layernorm"](x)
        queries, keys, values = kernels.qkv_rope(qkv(normed), offset, plan)
        keys, values = cache.update_and_fetch(keys, values)
        output = scaled_dot_product_attention(
            queries, keys, values, cache=cache, scale=attention.scale, mask=mask
        )
        # One query: (B, heads, 1, dim) holds its elements in (B, 1, heads, dim)'s order.
        output = attention["o_proj"](output.reshape(x.shape[0], 1, -1))
        norm = self["post_attention_layernorm"]
        h, normed = kernels.add_norm(x, output, norm["weight"], plan.eps)
        gate, up = mx.split(gate_up(normed), 2, axis=-1)
        mlp = self["mlp"]["down_proj"](swiglu(gate, up))
        following = self._mlxlab_next
        if following is None:
            return h + mlp
        norm = following["input_layernorm"]
        out, normed = kernels.add_norm(h, mlp, norm["weight"], norm.eps)
        object.__setattr__(following, "_mlxlab_pre", (out, normed))
        return out

    def _fused(self) -> tuple[Projection, Projection] | None:
        return fused_weights(self)


def fused_weights(block: nn.Module) -> tuple[Projection, Projection] | None:
    """The block's q/k/v and gate/up weights each as one matmul's, while its projections
    are the ones they were made of (the CUDA decode step reads them from any block with
    these parts); None where one is not fusable (mixed, an active adapter)."""
    layers = _sources(block)
    if any(layer is None for layer in layers):
        return None
    built = getattr(block, "_mlxlab_fused", None)
    arrays = _arrays(layers)
    if (
        built is None
        or len(built[0]) != len(arrays)
        or not all(a is b for a, b in zip(built[0], arrays, strict=True))
    ):
        if not (_fusable(layers[:3]) and _fusable(layers[3:])):
            return None
        attention, mlp = _fuse(layers[:3]), _fuse(layers[3:])
        built = (attention[0] + mlp[0], attention[1], mlp[1])
        # Not through Module.__setattr__, which would file the arrays among the parameters.
        object.__setattr__(block, "_mlxlab_fused", built)
    return built[1], built[2]


def _attention(attention, x: mx.array, qkv: Projection, mask, cache) -> mx.array:
    """mlx-lm's Llama attention, its three projections one matmul."""
    batch, length, _ = x.shape
    heads, kv_heads = attention.n_heads, attention.n_kv_heads
    dim = attention.head_dim
    queries, keys, values = mx.split(qkv(x), [heads * dim, (heads + kv_heads) * dim], -1)
    queries = queries.reshape(batch, length, heads, dim).transpose(0, 2, 1, 3)
    keys = keys.reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
    values = values.reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
    if cache is not None:
        queries = attention.rope(queries, offset=cache.offset)
        keys = attention.rope(keys, offset=cache.offset)
        keys, values = cache.update_and_fetch(keys, values)
    else:
        queries, keys = attention.rope(queries), attention.rope(keys)
    output = scaled_dot_product_attention(
        queries, keys, values, cache=cache, scale=attention.scale, mask=mask
    )
    return attention["o_proj"](output.transpose(0, 2, 1, 3).reshape(batch, length, -1))


def fuse_projections(model: nn.Module) -> int:
    """Give every eligible Llama block of `model` fused projections; returns how many."""
    layers = getattr(getattr(model, "model", None), "layers", None) or []
    kernels = decode_kernels.chosen()
    count = with_kernels = 0
    for block in layers:
        if eligible(block):
            block.__class__ = FusedProjectionsBlock
            object.__setattr__(block, "_mlxlab_fused", None)
            object.__setattr__(block, "_mlxlab_kernels", None)
            object.__setattr__(block, "_mlxlab_next", None)
            object.__setattr__(block, "_mlxlab_pre", None)
            if block._fused() is None:  # mixed, adapted: mlx-lm's block as it was
                block.__class__ = llama.TransformerBlock
                continue
            count += 1  # fused now, not on a request
            plan = decode_kernels.plan(block) if kernels is not None else None
            if plan is not None:
                object.__setattr__(block, "_mlxlab_kernels", (kernels, plan))
                with_kernels += 1
    decoding = [type(b) is FusedProjectionsBlock and b._mlxlab_kernels is not None for b in layers]
    for index in range(len(layers) - 1):
        if decoding[index] and decoding[index + 1]:
            object.__setattr__(layers[index], "_mlxlab_next", layers[index + 1])
    if count:
        log.info("%s decoder layers run fused q/k/v and gate/up projections", count)
    if with_kernels:
        log.info("%s of them decode with %s kernels", with_kernels, kernels.name)
    return count


def plain_blocks(model: nn.Module) -> list[nn.Module]:
    """Turn fused blocks back into mlx-lm's (bench/gpu_step.py compares against them); the blocks."""
    blocks = [b for b in model.model.layers if type(b) is FusedProjectionsBlock]
    for block in blocks:
        block.__class__ = llama.TransformerBlock
    return blocks
