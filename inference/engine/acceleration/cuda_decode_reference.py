"""The CUDA decode step's contract in MLX's own operations (cuda_decode.py).

`Reference` has the native extension's interface (a `Model` made of the weights in the
step's order, whose `step` returns the logits and the caches with this step's column
written) and computes what mlx-lm's Llama computes (and Qwen3's head norms, Qwen2's q/k/v biases), on
any device:
the CPU tests run the
model's glue against it, and MLXLAB_CUDA_DECODE=reference serves with it.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

# The native step's ways to the GPU (step.cpp's Replay), as the settings table names them.
from labsettings.engine import CUDA_DECODE_REPLAY_MODES as REPLAY_MODES


class Reference:
    """The native extension's contract in MLX's operations: what its step must compute."""

    class Model:
        def __init__(self, weights, layers, hidden, heads, kv_heads, head_dim, intermediate,
                     vocab, eps, attention_scale, rope_scale, rope_base, traditional, rope_freqs,
                     qk_norm_eps=0.0, qkv_bias=False):  # fmt: skip
            self.weights, self.layers, self.eps = weights, layers, eps
            self.qk_eps, self.qkv_bias = qk_norm_eps, qkv_bias
            # As the native step reads them: 6 a layer, then 2 head norms, then a q/k/v bias.
            self.per_layer = 6 + (2 if qk_norm_eps else 0) + (1 if qkv_bias else 0)
            if len(weights) != 3 + self.per_layer * layers:
                raise ValueError("expected 3 weights, then 6 a layer (and its norms, its bias)")
            self.heads, self.kv_heads, self.dim = heads, kv_heads, head_dim
            self.depths = (hidden, heads * head_dim, hidden, intermediate)  # qkv, o, gate_up, down
            self.scale = attention_scale
            self.quantized = any(len(matrix) == 3 for matrix in weights)
            self.rope = dict(traditional=traditional, scale=rope_scale, freqs=rope_freqs,
                             base=None if rope_freqs is not None else rope_base)  # fmt: skip

        def max_batch(self) -> int:
            return 32 if self.quantized else 64  # as the CUDA step (kMaxBatch, kMaxGemmBatch)

        replay_mode = "kept"  # as the native step

        def replay(self, mode: str) -> None:
            """How the CUDA step's kernels reach the GPU: nothing to the reference's result."""
            if mode not in REPLAY_MODES:
                raise ValueError("a replay mode is launched, captured or kept")
            self.replay_mode = mode

        def replays(self) -> str:
            return self.replay_mode

        def step(self, tokens, positions, first_columns, column, caches, copy_caches):
            embedding, (final_norm,), head = self.weights[:3]
            batch, heads, kv_heads, dim = tokens.size, self.heads, self.kv_heads, self.dim
            qkv_depth, o_depth, gate_up_depth, down_depth = self.depths
            x = _embed(embedding, tokens, qkv_depth)[:, None, :]
            columns = mx.arange(column + 1)
            mask = (columns >= first_columns[:, None]) & (columns <= column)
            mask = mask[:, None, None, :]
            out = []
            for layer in range(self.layers):
                start = 3 + self.per_layer * layer
                (norm,), qkv, o, (post,), gate_up, down = self.weights[start : start + 6]
                bias = self.weights[start + self.per_layer - 1][0] if self.qkv_bias else None
                projected = _matmul(mx.fast.rms_norm(x, norm, self.eps), qkv, qkv_depth, bias)
                q, k, v = mx.split(projected, [heads * dim, (heads + kv_heads) * dim], axis=-1)
                q, k = q.reshape(batch, 1, heads, dim), k.reshape(batch, 1, kv_heads, dim)
                if self.qk_eps:  # each head normed before RoPE, as Qwen3's attention does
                    (q_norm,), (k_norm,) = self.weights[start + 6 : start + 8]
                    q = mx.fast.rms_norm(q, q_norm, self.qk_eps)
                    k = mx.fast.rms_norm(k, k_norm, self.qk_eps)
                q = mx.fast.rope(q.transpose(0, 2, 1, 3), dim, offset=positions, **self.rope)
                k = mx.fast.rope(k.transpose(0, 2, 1, 3), dim, offset=positions, **self.rope)
                v = v.reshape(batch, 1, kv_heads, dim).transpose(0, 2, 1, 3)
                keys = mx.slice_update(caches[2 * layer], k, mx.array([column]), (2,))
                values = mx.slice_update(caches[2 * layer + 1], v, mx.array([column]), (2,))
                out += [keys, values]
                attended = mx.fast.scaled_dot_product_attention(
                    q, keys[..., : column + 1, :], values[..., : column + 1, :],
                    scale=self.scale, mask=mask,
                )  # fmt: skip
                attended = attended.transpose(0, 2, 1, 3).reshape(batch, 1, -1)
                x = x + _matmul(attended, o, o_depth)
                normed = mx.fast.rms_norm(x, post, self.eps)
                gate, up = mx.split(_matmul(normed, gate_up, gate_up_depth), 2, axis=-1)
                x = x + _matmul(nn.silu(gate) * up, down, down_depth)
            return [_matmul(mx.fast.rms_norm(x, final_norm, self.eps), head, qkv_depth), *out]


def _format(matrix: list[mx.array], depth: int) -> dict:
    """A quantized matrix's group size and bits, from its shapes and its rows' length."""
    packed, scales = matrix[0], matrix[1]
    return dict(group_size=depth // scales.shape[-1], bits=32 * packed.shape[-1] // depth)


def _matmul(x: mx.array, matrix: list[mx.array], depth: int, bias=None) -> mx.array:
    """x times a matrix's transpose (plus `bias`), as mlx-lm's Linear or QuantizedLinear
    computes it."""
    if len(matrix) == 1:
        return x @ matrix[0].T if bias is None else mx.addmm(bias, x, matrix[0].T)
    out = mx.quantized_matmul(x, *matrix, transpose=True, **_format(matrix, depth))
    return out if bias is None else out + bias


def _embed(matrix: list[mx.array], tokens: mx.array, hidden: int) -> mx.array:
    """The tokens' rows, as mlx-lm's Embedding or QuantizedEmbedding computes them."""
    if len(matrix) == 1:
        return matrix[0][tokens]
    return mx.dequantize(*(array[tokens] for array in matrix), **_format(matrix, hidden))
