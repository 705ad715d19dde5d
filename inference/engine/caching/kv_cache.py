"""A quantized KV cache that batches: mlx-lm's QuantizedKVCache, row-batched as its
BatchKVCache is (left padding, per-row offsets, filter, extend, extract, merge).

mlx-lm 0.32 batches only unquantized caches. The layout, the quantization (`mx.quantize`
of every new key and value) and the attention kernel (models/base.py dispatches to
`quantized_scaled_dot_product_attention` on a cache with `bits`) are mlx-lm's; this
module only adds the batch bookkeeping, following BatchKVCache line for line.
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_map, tree_reduce
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import (
    BatchKVCache,
    KVCache,
    QuantizedKVCache,
    _BaseCache,
    dynamic_roll,
)


class QuantizedRowCache(QuantizedKVCache):
    """One sequence's quantized cache that BatchGenerator can merge into a batch."""

    def size(self) -> int:
        return self.offset

    @classmethod
    def merge(cls, caches: list) -> BatchQuantizedKVCache:
        return BatchQuantizedKVCache.merge(caches)


def quantize_row(cache: KVCache, *, group_size: int, bits: int) -> QuantizedRowCache:
    """An unquantized row cache quantized as mlx-lm's KVCache.to_quantized does."""
    row = QuantizedRowCache(group_size=group_size, bits=bits)
    row.offset = cache.offset
    if cache.keys is not None:
        row.keys = tuple(mx.quantize(cache.keys, group_size=group_size, bits=bits))
        row.values = tuple(mx.quantize(cache.values, group_size=group_size, bits=bits))
    return row


def _parts(cache) -> tuple:
    """Every array of a quantized cache's keys and values: (packed, scales, biases) twice."""
    return tuple(cache.keys) + tuple(cache.values)


class BatchQuantizedKVCache(_BaseCache):
    """Keys and values as mx.quantize triples of shape (batch, heads, length, ...),
    left-padded like BatchKVCache."""

    step = 256

    def __init__(self, left_padding: list[int], *, group_size: int = 64, bits: int = 8) -> None:
        self.keys = None
        self.values = None
        self.left_padding = mx.array(left_padding)
        self.offset = mx.array([-pad for pad in left_padding])
        self.group_size = group_size
        self.bits = bits
        self._idx = 0
        self._right_padding = None

    @classmethod
    def from_batch(
        cls, cache: BatchKVCache, *, group_size: int, bits: int
    ) -> BatchQuantizedKVCache:
        """An unquantized batch's rows quantized in place of it (a row reaching its start)."""
        quantized = cls([], group_size=group_size, bits=bits)
        quantized.left_padding, quantized.offset = cache.left_padding, cache.offset
        quantized._idx = cache._idx
        if cache.keys is not None:
            used = (cache.keys[..., : cache._idx, :], cache.values[..., : cache._idx, :])
            quantized.keys, quantized.values = (
                tuple(mx.quantize(x, group_size=group_size, bits=bits)) for x in used
            )
        return quantized

    def _grow(self, keys: mx.array, values: mx.array) -> None:
        batch, heads, steps = keys.shape[:3]
        length = (self.step + steps - 1) // self.step * self.step
        per_word = 32 // self.bits

        def empty(dim: int) -> tuple:
            shape = (batch, heads, length)
            groups = dim // self.group_size
            return (
                mx.zeros((*shape, dim // per_word), dtype=mx.uint32),
                mx.zeros((*shape, groups), dtype=keys.dtype),
                mx.zeros((*shape, groups), dtype=keys.dtype),
            )

        new_keys, new_values = empty(keys.shape[-1]), empty(values.shape[-1])
        if self.keys is None:
            self.keys, self.values = new_keys, new_values
            return
        if self._idx % self.step:
            self.keys, self.values = self._used()
        self.keys, self.values = tree_map(
            lambda old, new: mx.concatenate([old, new], axis=2),
            (self.keys, self.values),
            (new_keys, new_values),
        )

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        previous, steps = self._idx, keys.shape[2]
        if self.keys is None or previous + steps > self.keys[0].shape[2]:
            self._grow(keys, values)
        self.offset = self.offset + steps
        self._idx += steps
        for stored, new in ((self.keys, keys), (self.values, values)):
            quantized = mx.quantize(new, group_size=self.group_size, bits=self.bits)
            for part, piece in zip(stored, quantized, strict=True):
                part[..., previous : self._idx, :] = piece
        return self._used()

    def _used(self) -> tuple:
        return tree_map(lambda x: x[..., : self._idx, :], (self.keys, self.values))

    def keys_and_values(self):
        return self._used()

    def prepare(self, *, left_padding=None, lengths=None, right_padding=None) -> None:
        if left_padding is not None:
            if self.keys is not None:
                raise ValueError("Left padding can only be added to an empty cache")
            left_padding = mx.array(left_padding)
            self.left_padding += left_padding
            self.offset = self.offset - left_padding
        if right_padding is not None and max(right_padding) > 0:
            self._right_padding = mx.array(right_padding)

    def finalize(self) -> None:
        """Turn a prompt step's right padding into left padding, as BatchKVCache does."""
        if self._right_padding is None:
            return
        padding = self._right_padding
        self.keys, self.values = tree_map(
            lambda x: dynamic_roll(x, padding[:, None], axis=2), (self.keys, self.values)
        )
        self.offset = self.offset - padding
        self.left_padding += padding
        self._right_padding = None

    @property
    def state(self):
        return self.keys, self.values, self.offset, self.left_padding, self._idx

    @state.setter
    def state(self, value) -> None:
        self.keys, self.values, self.offset, self.left_padding, self._idx = value

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self._idx, n)
        self._idx -= n
        self.offset = self.offset - n
        return n

    def make_mask(self, N: int, return_array: bool = False, **kwargs):  # noqa: N803 (mlx-lm's)
        return create_causal_mask(N, offset=self._idx, left_padding=self.left_padding, **kwargs)

    def filter(self, batch_indices) -> None:
        """Keep the given rows, then drop the padding every remaining row has."""
        if self.keys is not None:
            self.keys, self.values = tree_map(lambda x: x[batch_indices], (self.keys, self.values))
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        shift = min(self.left_padding.tolist())
        if shift > 0:
            if self.keys is not None:
                self.keys, self.values = tree_map(
                    lambda x: x[..., shift:, :], (self.keys, self.values)
                )
            self._idx -= shift
            self.left_padding -= shift

    def extend(self, other: BatchQuantizedKVCache) -> None:
        """Append `other`'s rows, both right-aligned at the longer one's index."""
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        template = self if self.keys is not None else other
        top = max(self._idx, other._idx)
        size = max(c.keys[0].shape[2] for c in (self, other) if c.keys is not None)

        def aligned(cache):
            keys, values = cache.keys, cache.values
            if keys is None:
                rows = cache.offset.shape[0]
                keys, values = tree_map(
                    lambda x: mx.zeros((rows, x.shape[1], 0, x.shape[3]), dtype=x.dtype),
                    (template.keys, template.values),
                )
            left = top - cache._idx
            right = size - keys[0].shape[2] - left
            if right < 0:
                keys, values = tree_map(lambda x: x[..., :right, :], (keys, values))
                right = 0
            if left or right:
                widths = [(0, 0), (0, 0), (left, right), (0, 0)]
                keys, values = tree_map(lambda x: mx.pad(x, widths), (keys, values))
            return keys, values, cache.left_padding + left

        mine, theirs = aligned(self), aligned(other)
        self.keys, self.values = tree_map(
            lambda a, b: mx.concatenate([a, b]), (mine[0], mine[1]), (theirs[0], theirs[1])
        )
        self.offset = mx.concatenate([self.offset, other.offset])
        self.left_padding = mx.concatenate([mine[2], theirs[2]])
        self._idx = top

    def extract(self, idx: int) -> QuantizedRowCache:
        row = QuantizedRowCache(group_size=self.group_size, bits=self.bits)
        padding = self.left_padding.tolist()[idx]
        row.keys, row.values = tree_map(
            lambda x: mx.contiguous(x[idx : idx + 1, :, padding : self._idx]),
            (self.keys, self.values),
        )
        row.offset = self._idx - padding
        return row

    @classmethod
    def merge(cls, caches: list) -> BatchQuantizedKVCache:
        """One batch of single-sequence quantized caches, left-padded to the longest."""
        first = caches[0]
        if any((c.group_size, c.bits) != (first.group_size, first.bits) for c in caches):
            raise ValueError("quantized caches of different schemes cannot share a batch")
        lengths = [c.offset if c.keys is not None else 0 for c in caches]
        longest = max(lengths)
        padding = [longest - length for length in lengths]
        merged = cls(padding, group_size=first.group_size, bits=first.bits)
        if longest == 0:
            return merged
        template = next(c for c in caches if c.keys is not None)
        keys, values = tree_map(
            lambda x: mx.zeros((len(caches), x.shape[1], longest, x.shape[3]), dtype=x.dtype),
            (tuple(template.keys), tuple(template.values)),
        )
        for row, (pad, cache) in enumerate(zip(padding, caches, strict=True)):
            if cache.keys is None:
                continue
            for target, source in zip(keys + values, _parts(cache), strict=True):
                target[row : row + 1, :, pad : pad + cache.offset] = source[..., : cache.offset, :]
        merged.keys, merged.values = keys, values
        merged.offset += longest
        merged._idx = longest
        return merged

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return tree_reduce(lambda total, x: total + x.nbytes, (self.keys, self.values), 0)
