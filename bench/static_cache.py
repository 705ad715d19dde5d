"""A fixed-shape KV cache for mlx-lm's Llama models: the probe's compiled decode step.

mlx-lm's caches grow (a new shape every 256 tokens) and keep their offset as a Python
int, so a compiled step would retrace at every token. Here every layer's keys and values
live in buffers of a fixed capacity, the write position is an int32 array, and attention
reads the whole capacity under a mask of the filled columns: every decode step has the
same shapes and the same graph, as transformers' static cache has for CUDA graphs.
"""

from __future__ import annotations

import mlx.core as mx


class StaticCache:
    """One layer's keys and values, (batch, kv heads, capacity, head dim), and the index
    of the first column not yet written (an int32 scalar array)."""

    def __init__(self, keys: mx.array, values: mx.array, index: mx.array) -> None:
        self.keys, self.values, self.index = keys, values, index

    @classmethod
    def for_model(cls, model, batch: int, capacity: int) -> list[StaticCache]:
        caches = []
        for layer in model.layers:
            attention = layer.self_attn
            shape = (batch, attention.n_kv_heads, capacity, attention.head_dim)
            dtype = attention.k_proj.weight.dtype
            if dtype not in (mx.float16, mx.bfloat16, mx.float32):  # quantized weights
                dtype = attention.k_proj.scales.dtype
            caches.append(cls(mx.zeros(shape, dtype), mx.zeros(shape, dtype), mx.array(0)))
        mx.eval([(c.keys, c.values) for c in caches])
        return caches

    @property
    def offset(self) -> mx.array:
        return self.index  # RoPE's position of the first new token

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        start = mx.reshape(self.index, (1,))
        self.keys = mx.slice_update(self.keys, keys, start, axes=(2,))
        self.values = mx.slice_update(self.values, values, start, axes=(2,))
        return self.keys, self.values

    def make_mask(self, N: int, return_array: bool = False, window_size=None):  # noqa: N803
        """Query i (at position index + i) sees the columns up to its own."""
        columns = mx.arange(self.keys.shape[2])
        rows = self.index + mx.arange(N)
        return columns[None, :] <= rows[:, None]


def prefill_into(model, prompt: mx.array, caches: list[StaticCache]) -> mx.array:
    """Run the prompt into empty caches; the first generated token (greedy)."""
    for cache in caches:
        cache.index = mx.array(0, dtype=mx.int32)
    logits = model(prompt, cache=caches)[:, -1, :]
    for cache in caches:
        cache.index = mx.array(prompt.shape[1], dtype=mx.int32)
    token = mx.argmax(logits, axis=-1)
    mx.eval(token, [(c.keys, c.values) for c in caches])
    return token


def decode_step(model):
    """f(tokens, index, keys, values) -> (next tokens, index + 1, keys, values): pure, so
    that `mx.compile` can trace it once per batch size."""

    def step(token: mx.array, index: mx.array, keys: list, values: list):
        caches = [StaticCache(k, v, index) for k, v in zip(keys, values, strict=True)]
        logits = model(token[:, None], cache=caches)[:, -1, :]
        return (
            mx.argmax(logits, axis=-1),
            index + 1,
            [c.keys for c in caches],
            [c.values for c in caches],
        )

    return step
