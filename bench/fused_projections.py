"""A Llama decode step with fused projections: the probe's fewer-kernels variant.

On MLX's CUDA backend each kernel of a step costs host work to encode (and at batch 2+
each cuBLAS matmul a stream capture), and that host work, not the device, bounds a step
(bench/gpu_step.py). Here each layer's q, k and v projections run as one matmul over
their concatenated weights, and the gate and up projections as another: 7 matmuls a
layer become 4. Dense (unquantized) weights only.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.activations import swiglu
from mlx_lm.models.base import create_attention_mask, scaled_dot_product_attention


def fuse(model) -> list[tuple[mx.array, mx.array]]:
    """Per layer: (q|k|v weight, gate|up weight), concatenated along the output axis."""
    fused = []
    for layer in model.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        qkv = [attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]
        gate_up = [mlp.gate_proj.weight, mlp.up_proj.weight]
        fused.append((mx.concatenate(qkv), mx.concatenate(gate_up)))
    mx.eval(fused)
    return fused


def forward(model, fused, inputs: mx.array, cache: list) -> mx.array:
    """mlx-lm's Llama forward pass (no biases, tied or untied head) on fused weights."""
    inner = model.model
    h = inner.embed_tokens(inputs)
    mask = create_attention_mask(h, cache[0])
    for layer, (qkv_weight, gate_up_weight), layer_cache in zip(
        inner.layers, fused, cache, strict=True
    ):
        h = h + _attention(layer.self_attn, layer.input_layernorm(h), qkv_weight, mask, layer_cache)
        x = layer.post_attention_layernorm(h)
        gate, up = mx.split(x @ gate_up_weight.T, 2, axis=-1)
        h = h + layer.mlp.down_proj(swiglu(gate, up))
    h = inner.norm(h)
    if model.args.tie_word_embeddings:
        return inner.embed_tokens.as_linear(h)
    return model.lm_head(h)


def _attention(attention, x: mx.array, weight: mx.array, mask, cache) -> mx.array:
    batch, length, _ = x.shape
    heads, kv_heads, dim = attention.n_heads, attention.n_kv_heads, attention.head_dim
    queries, keys, values = mx.split(x @ weight.T, [heads * dim, (heads + kv_heads) * dim], -1)
    queries = queries.reshape(batch, length, heads, dim).transpose(0, 2, 1, 3)
    keys = keys.reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
    values = values.reshape(batch, length, kv_heads, dim).transpose(0, 2, 1, 3)
    queries = attention.rope(queries, offset=cache.offset)
    keys = attention.rope(keys, offset=cache.offset)
    keys, values = cache.update_and_fetch(keys, values)
    output = scaled_dot_product_attention(
        queries, keys, values, cache=cache, scale=attention.scale, mask=mask
    )
    return attention.o_proj(output.transpose(0, 2, 1, 3).reshape(batch, length, -1))
