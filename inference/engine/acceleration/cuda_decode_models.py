"""Which models the CUDA decode step (cuda_decode.py) takes: every layer Llama's as
layer_shape.describe reads it, with or without Qwen3's head norms and Qwen2's q/k/v biases,
each matrix of a kind and dtype the native step reads."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, make_prompt_cache

from . import fused_projections
from .cuda_decode_weights import weights_in_order
from .layer_shape import SEPARATE_MLP, SEPARATE_QKV, Shape, Unfit, describe, norm_offset

# The layers the step computes: Llama's norms and projections, SiLU, RoPE over whole heads;
# with or without q and k norms on each head (Qwen3's) and q/k/v biases (Qwen2's).
LLAMA_NORMS = ("input_layernorm", None, "post_attention_layernorm", None)
GPU_PROJECTIONS = (nn.Linear, nn.QuantizedLinear)


def shape_of(model: nn.Module) -> Shape | Unfit:
    """Every layer's Shape (layer_shape.describe) where the step computes it, or why not."""
    if not isinstance(model, nn.Module) or "model" not in model:
        return Unfit("a model without a `model` part")
    inner = model["model"]
    if _parts(model) - {"model", "lm_head"} or not isinstance(inner, nn.Module):
        return Unfit("a model of other parts than a text model and its head")
    if _parts(inner) != {"embed_tokens", "layers", "norm"}:
        return Unfit("a text model of other parts than embed_tokens, layers and norm")
    layers = inner["layers"]
    if not layers or norm_offset(inner["norm"]) != 0.0:
        return Unfit("a final norm that is not an RMSNorm of its weight")
    if any(getattr(block, "use_sliding", False) for block in layers):
        return Unfit("sliding-window layers")
    if any(type(cache) is not KVCache for cache in make_prompt_cache(model)):
        return Unfit("caches other than plain KV caches")
    shapes = [describe(block, getattr(model, "args", None), GPU_PROJECTIONS) for block in layers]
    shape = next((s for s in shapes if isinstance(s, Unfit)), shapes[0])
    if isinstance(shape, Unfit):
        return shape
    if any(other != shape for other in shapes):
        return Unfit("layers of different shapes")
    return _within_the_step(shape)


def _parts(module: nn.Module) -> set[str]:
    """The names of a module's parts that are modules or lists of them (not Llama's list
    of layer types)."""
    return {
        name
        for name, value in module.items()
        if isinstance(value, nn.Module)
        or (isinstance(value, list) and value and all(isinstance(v, nn.Module) for v in value))
    }


def _within_the_step(shape: Shape) -> Shape | Unfit:
    if shape.norms != LLAMA_NORMS or shape.norm_offset:
        return Unfit("norms other than Llama's input and post-attention RMSNorms")
    if shape.qkv != SEPARATE_QKV:
        return Unfit("q/k/v projections other than three")
    if shape.qk_norm_eps and shape.qk_norm_full:
        return Unfit("q and k norms across all heads")
    if shape.mlp != SEPARATE_MLP or shape.activation != "silu" or shape.residual_scale != 1.0:
        return Unfit("an MLP or residual other than Llama's")
    if shape.rope.dims != shape.head_dim or shape.rope.mscale != 1.0:
        return Unfit("a RoPE over part of each head, or scaling it")
    return shape


def entries(shape: Shape) -> dict:
    """What each layer's weights hold besides Llama's (weights_in_order's flags)."""
    return {"head_norms": bool(shape.qk_norm_eps), "qkv_bias": shape.qkv_bias}


def eligible(model: nn.Module) -> bool:
    """Whether the step computes what this model's one-token steps compute."""
    shape = shape_of(model)
    if isinstance(shape, Unfit):
        return False
    fused = [fused_projections.fused_weights(block) for block in model["model"]["layers"]]
    try:
        weights = weights_in_order(model, fused, **entries(shape))
    except TypeError:  # a matrix the step takes neither plain nor quantized
        return False
    dtype = model["model"]["norm"]["weight"].dtype
    # Every array in the model's dtype but a quantized matrix's packed weight.
    floats = [array for entry in weights for array in (entry if len(entry) == 1 else entry[1:])]
    return dtype in (mx.bfloat16, mx.float16) and all(array.dtype == dtype for array in floats)
