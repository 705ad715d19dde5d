"""Exact verification: attention over several new queries, each computed as a plain step
computes it.

On the CPU the attention of `k + 1` queries sums in another order than one query's
(OpenBLAS blocks differently), which moved logits by ~1e-4, so a verifying pass
(loop/speculative.py) would not give the tokens decoding one by one gives. Inside
`exact_attention()`, the layers this module serves attend one query at a time, each over
the keys a plain step would see: the native fused block (fused_decode.py) computes each
query that way by itself, and over the caches it does not take (quantized KV rows, an
active adapter) it calls `attend_exactly` below. Elsewhere attention is mlx-lm's own.

A batch cache reads `exact_attention_on()` too: inside, its masks stay arrays (the split
below needs one row per query), never MLX's "causal" mode.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import mlx.core as mx
from mlx_lm.models.base import scaled_dot_product_attention

_exact = threading.local()


@contextmanager
def exact_attention(enabled: bool = True):
    """Inside: attention over several new queries runs one query at a time (see above)."""
    previous = getattr(_exact, "on", False)
    _exact.on = enabled
    try:
        yield
    finally:
        _exact.on = previous


def exact_attention_on() -> bool:
    """Whether this thread is inside `exact_attention()` (a verifying pass)."""
    return getattr(_exact, "on", False)


def attend_exactly(attention, x: mx.array, mask, cache, shape) -> mx.array:
    """mlx-lm's attention of the shapes the fused layers take (layer_shape.py: q/k/v or
    one fused projection, q and k norms of each head or across heads, the module's own
    RoPE at the cache's offset, the cache's update), its scaled dot-product attention
    computed query by query. `shape`: the block's (layer_shape.Shape)."""
    batch, length, _ = x.shape
    heads, kv_heads = shape.heads, shape.kv_heads
    if "qkv_proj" in attention:
        qkv = attention.qkv_proj(x)
        width = qkv.shape[-1] // (heads + 2 * kv_heads)
        queries, keys, values = mx.split(qkv, [heads * width, (heads + kv_heads) * width], -1)
    else:
        queries, keys, values = attention.q_proj(x), attention.k_proj(x), attention.v_proj(x)
    across = "q_norm" in attention and attention.q_norm.weight.shape[0] == queries.shape[-1]
    if across:  # OLMo 2's: each token's heads normed as one vector
        queries, keys = attention.q_norm(queries), attention.k_norm(keys)
    queries = queries.reshape(batch, length, heads, -1)
    keys = keys.reshape(batch, length, kv_heads, -1)
    values = values.reshape(batch, length, kv_heads, -1)
    if "q_norm" in attention and not across:
        queries, keys = attention.q_norm(queries), attention.k_norm(keys)
    queries, keys, values = (t.transpose(0, 2, 1, 3) for t in (queries, keys, values))
    queries = attention.rope(queries, offset=cache.offset)
    keys = attention.rope(keys, offset=cache.offset)
    keys, values = cache.update_and_fetch(keys, values)
    output = per_query(queries, keys, values, cache, shape.scale, mask)
    return attention.o_proj(output.transpose(0, 2, 1, 3).reshape(batch, length, -1))


def per_query(queries, keys, values, cache, scale: float, mask) -> mx.array:
    """Attention of each query as a one-query step computes it."""
    if queries.shape[2] == 1:
        return scaled_dot_product_attention(queries, keys, values, cache, scale, mask)
    if _broadcastable(keys, mask):
        return _each_query(queries, keys, values, scale, mask)
    return _query_by_query(queries, keys, values, cache, scale, mask)


def _broadcastable(keys, mask) -> bool:
    return (
        not isinstance(keys, tuple)
        and isinstance(mask, mx.array)
        and mask.dtype == mx.bool_
        and mask.ndim == 4
        and mask.shape[1] == 1
    )


def _each_query(queries, keys, values, scale: float, mask):
    """MLX's CPU attention (its fallback: scale, matmul, masked precise softmax, matmul),
    with every query a batch entry of its own (its heads sharing a KV head as the rows of
    one product, as in a plain step), over keys masked past its position (their weights
    are exactly zero). Measured: 101 ms a 13-position pass, against 111 ms with each head
    apart and 92.5 ms attending all queries at once (CPU time, SmolLM2-135M)."""
    batch, heads, length, dims = queries.shape
    kv_heads, total = keys.shape[1], keys.shape[2]
    q = mx.array(scale, queries.dtype) * queries
    q = q.reshape(batch, kv_heads, heads // kv_heads, length, dims).transpose(0, 1, 3, 2, 4)
    scores = q @ keys[:, :, None].swapaxes(-1, -2)
    visible = mask.reshape(mask.shape[0], 1, length, 1, total)
    scores = mx.where(visible, scores, mx.array(-mx.inf, scores.dtype))
    weights = mx.softmax(scores, axis=-1, precise=True)
    out = weights @ values[:, :, None]
    return out.transpose(0, 1, 3, 2, 4).reshape(batch, heads, length, values.shape[-1])


def _query_by_query(queries, keys, values, cache, scale: float, mask):
    """One attention call a query, over the keys up to it (quantized caches)."""
    length = queries.shape[2]
    total = (keys[0] if isinstance(keys, tuple) else keys).shape[2]
    outputs = []
    for j in range(length):
        end = total - length + j + 1
        outputs.append(
            scaled_dot_product_attention(
                queries[:, :, j : j + 1],
                _until(keys, end),
                _until(values, end),
                cache,
                scale,
                _mask_row(mask, j, end),
            )
        )
    return mx.concatenate(outputs, axis=2)


def _until(tensor, end: int):
    if isinstance(tensor, tuple):  # a quantized cache's (packed, scales, biases)
        return tuple(part[..., :end, :] for part in tensor)
    return tensor[..., :end, :]


def _mask_row(mask, row: int, end: int):
    if mask is None or isinstance(mask, str):  # "causal": one query sees every key up to it
        return None
    rows = mask.shape[-2]
    return mask[..., row : row + 1, :end] if rows > 1 else mask[..., :end]
