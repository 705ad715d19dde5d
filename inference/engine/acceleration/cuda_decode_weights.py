"""What of a model the CUDA decode step takes, and in which order (cuda_decode.py).

The step reads its weights as one list: the embedding, the final norm, lm_head, then each
layer's input norm, fused q/k/v, o, post-attention norm, fused gate/up and down, its q
and k head norms where it has them (Qwen3's), and its q/k/v biases, fused, where it has
them (Qwen2's); each a
norm's or a plain matrix's one array, or a quantized matrix's packed weight, scales and
biases (MLX's affine mode, FORMATS). TypeError where a matrix is of a kind the step lacks.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from .rope_tables import Rope

# The quantizations the native kernels take, as (group size, bits): MLX's affine mode.
FORMATS = {(32, 4), (64, 4), (32, 8), (64, 8)}


def matrix_of(module: nn.Module) -> list[mx.array] | None:
    """A bias-free Linear's or Embedding's arrays (its weight; or packed weight, scales and
    biases when quantized in one of FORMATS), or None."""
    if "bias" in module:
        return None
    if type(module) in (nn.Linear, nn.Embedding):
        return [module["weight"]]
    if type(module) not in (nn.QuantizedLinear, nn.QuantizedEmbedding):
        return None
    if (
        getattr(module, "mode", "affine") != "affine"
        or (module.group_size, module.bits) not in FORMATS
    ):
        return None
    return [module["weight"], module["scales"], module["biases"]]


def rope_freqs(found: Rope) -> mx.array | None:
    """The step's table of periods (MLX's `freqs`), or None for a plain RoPE."""
    return None if found.periods is None else mx.array(found.periods, mx.float32)


def weights_in_order(
    model: nn.Module, fused, head_norms: bool = False, qkv_bias: bool = False
) -> list[list[mx.array]]:
    """The model's weights in the native step's order, each a list (a norm's, a bias's or
    a plain matrix's one array; a quantized matrix's packed weight, scales and biases), with
    each layer's fused projections, its q and k head norms with `head_norms` and its fused
    q/k/v bias with `qkv_bias`. TypeError where a matrix is of a kind the step lacks, or a
    layer's biases are not so."""
    inner = model["model"]
    head = model["lm_head"] if "lm_head" in model else inner["embed_tokens"]  # tied
    weights = [_taken(inner["embed_tokens"]), [inner["norm"]["weight"]], _taken(head)]
    for block, projections in zip(inner["layers"], fused, strict=True):
        if projections is None or any(p.quantization not in (None, *FORMATS) for p in projections):
            raise TypeError("projections the CUDA decode step does not take")
        qkv, gate_up = projections
        if gate_up.bias is not None or (qkv.bias is not None) != qkv_bias:
            raise TypeError("biases the CUDA decode step does not add")
        weights += [[block["input_layernorm"]["weight"]], list(qkv.arrays),
                    _taken(block["self_attn"]["o_proj"]),
                    [block["post_attention_layernorm"]["weight"]], list(gate_up.arrays),
                    _taken(block["mlp"]["down_proj"])]  # fmt: skip
        if head_norms:
            attention = block["self_attn"]
            weights += [[attention["q_norm"]["weight"]], [attention["k_norm"]["weight"]]]
        if qkv_bias:
            weights.append([qkv.bias])
    return weights


def _taken(module: nn.Module) -> list[mx.array]:
    matrix = matrix_of(module)
    if matrix is None:
        raise TypeError(f"the CUDA decode step takes no {type(module).__name__} of this kind")
    return matrix


def flat(weights: list[list[mx.array]]) -> list[mx.array]:
    return [array for entry in weights for array in entry]


def norms_in_the_weights_dtype(model: nn.Module) -> list[tuple[str, mx.array]]:
    """Cast float32 norms to the one 16-bit dtype of every other float in the model; returns
    the norms as they were (nothing where the model is not so).

    Quantized models may keep their norms in float32 beside float16 scales (the default
    model does), and mlx-lm then computes every layer in float32 from the first norm on; the
    step takes one 16-bit dtype. With float16 norms the default model chose 44 of the 48
    greedy tokens it chose in float32, the first difference 12 tokens into an answer
    ("The default model's own weights, and what the GPU rows measured" in docs/BENCHMARKS.md's
    history: git show 02df74b:docs/BENCHMARKS.md)."""
    leaves = tree_flatten(model.parameters())
    halves = {a.dtype for _, a in leaves if a.dtype in (mx.float16, mx.bfloat16)}
    norms = [(path, a) for path, a in leaves if a.dtype == mx.float32]
    if len(halves) != 1 or not norms or any(a.ndim != 1 for _, a in norms):
        return []
    (dtype,) = halves
    model.update(tree_unflatten([(path, a.astype(dtype)) for path, a in norms]))
    return norms
