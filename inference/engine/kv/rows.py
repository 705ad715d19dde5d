"""The batch's KV caches: one row a sequence, left-padded so that every row ends at one
column, plain (`RowsKVCache`) or quantized (`RowsQuantizedKVCache`).

The layout is ours, so the loop, the native decode steps and the KV lanes read it through
public attributes (`idx`, `left_padding`, `offset`, `right_padding`) rather than another
library's internals. It is the layout mlx-lm's models expect of a batch cache: they read
`offset` (an array, a position a row) for RoPE, call `update_and_fetch` and ask
`make_mask`; a cache with `bits` takes mlx-lm's quantized attention. The arithmetic (growth
in 256-column steps, right padding rolled into left padding after a prompt step, the filter
that drops the padding every row shares) follows mlx-lm's BatchKVCache, so a row computes
what a single-sequence cache computes.

Masks are ours too. A decode step of rows none of which is left-padded needs no mask (one
query sees every key), and on MLX's CUDA backend an array mask rules out its fused decode
attention: one stream of a 1B model decoded 1.4-1.5x faster without it on an H200, a batch
of 8 up to 1.85x. A prompt step over such rows takes MLX's "causal" mode on a GPU (cuDNN's
causal attention, where an array takes the path that materialises the scores); on the CPU
MLX builds the same triangle either way, so the array stays. Quantized rows always take
the array (mlx-lm's quantized attention wants one).
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_map, tree_reduce
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import KVCache, QuantizedKVCache, dynamic_roll

# Prompt steps of an unpadded batch in MLX's "causal" mode: None (the default) on a GPU
# only; True or False everywhere (the tests, and bench/first_token.py's A/B).
CAUSAL_PROMPT_STEPS: bool | None = None


def causal_prompt_steps() -> bool:
    """Whether an unpadded batch's prompt steps ask MLX for its "causal" mode."""
    if CAUSAL_PROMPT_STEPS is not None:
        return CAUSAL_PROMPT_STEPS
    return mx.default_device() == mx.gpu


def _columns(keys) -> int:
    return (keys[0] if isinstance(keys, tuple) else keys).shape[2]


def _leaves(keys, values) -> list[mx.array]:
    """Every array of keys and values: two, or (packed, scales, biases) twice."""
    pair = (keys, values)
    return [a for part in pair for a in (part if isinstance(part, tuple) else (part,))]


class BatchRows:
    """Rows left-padded to one index: what the plain and quantized caches share."""

    step = 256

    def __init__(self, left_padding: list[int]) -> None:
        self.keys = None
        self.values = None
        self.offset = mx.array([-pad for pad in left_padding])
        self.idx = 0  # columns in use: every row's last token is at idx - 1
        self.right_padding: mx.array | None = None  # a prompt step's, until finalize()
        self._set_padding(mx.array(left_padding))

    def _set_padding(self, padding: mx.array) -> None:
        # Always a new array, never updated in place: `unpadded` remembers it by identity.
        self.left_padding = padding
        self._unpadded: bool | None = None

    def unpadded(self) -> bool:
        """Whether no row is left-padded (read from the device once per padding change)."""
        if self._unpadded is None:
            self._unpadded = not mx.any(self.left_padding).item()
        return self._unpadded

    # -- what the two layouts store differently ------------------------------------

    def _blank(self, keys: mx.array, values: mx.array, columns: int):
        raise NotImplementedError

    def _write(self, start: int, keys: mx.array, values: mx.array) -> None:
        raise NotImplementedError

    def _row_cache(self):
        raise NotImplementedError

    # -- mlx-lm's cache protocol ------------------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        previous, steps = self.idx, keys.shape[2]
        if self.keys is None or previous + steps > _columns(self.keys):
            self._grow(keys, values, steps)
        self.offset = self.offset + steps
        self.idx += steps
        self._write(previous, keys, values)
        return self.keys_and_values()

    def _grow(self, keys: mx.array, values: mx.array, steps: int) -> None:
        columns = (self.step + steps - 1) // self.step * self.step
        new_keys, new_values = self._blank(keys, values, columns)
        if self.keys is None:
            self.keys, self.values = new_keys, new_values
            return
        if self.idx % self.step:
            self.keys, self.values = self.keys_and_values()
        self.keys, self.values = tree_map(
            lambda old, new: mx.concatenate([old, new], axis=2),
            (self.keys, self.values),
            (new_keys, new_values),
        )

    def keys_and_values(self):
        return tree_map(lambda x: x[..., : self.idx, :], (self.keys, self.values))

    @property
    def state(self):
        return self.keys, self.values, self.offset, self.left_padding, self.idx

    @state.setter
    def state(self, value) -> None:
        self.keys, self.values, self.offset, padding, self.idx = value
        self._set_padding(padding)

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self.idx, n)
        self.idx -= n
        self.offset = self.offset - n
        return n

    def size(self) -> int:
        return self.idx

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return tree_reduce(lambda total, x: total + x.nbytes, (self.keys, self.values), 0)

    # -- the batch's own operations ------------------------------------------------

    def prepare(self, *, left_padding=None, lengths=None, right_padding=None) -> None:
        """Before a prompt step: padding added on the left (an empty cache), or the right
        padding of rows whose pieces are shorter than the step's widest."""
        if left_padding is not None:
            if self.keys is not None:
                raise ValueError("left padding can only be added to an empty cache")
            left_padding = mx.array(left_padding)
            self._set_padding(self.left_padding + left_padding)
            self.offset = self.offset - left_padding
        if right_padding is not None and max(right_padding) > 0:
            self.right_padding = mx.array(right_padding)

    def finalize(self) -> None:
        """After a prompt step: its right padding rolled to the left of each row."""
        if self.right_padding is None:
            return
        padding = self.right_padding
        self.keys, self.values = tree_map(
            lambda x: dynamic_roll(x, padding[:, None], axis=2), (self.keys, self.values)
        )
        self.offset = self.offset - padding
        self._set_padding(self.left_padding + padding)
        self.right_padding = None

    def filter(self, rows: list[int]) -> None:
        """Keep the given rows, then drop the padding every remaining row has."""
        if self.keys is not None:
            self.keys, self.values = tree_map(lambda x: x[rows], (self.keys, self.values))
        self.offset = self.offset[rows]
        padding = self.left_padding[rows]
        shift = min(padding.tolist()) if rows else 0
        if shift > 0:
            if self.keys is not None:
                self.keys, self.values = tree_map(
                    lambda x: x[..., shift:, :], (self.keys, self.values)
                )
            self.idx -= shift
            padding = padding - shift
        self._set_padding(padding)

    def extend(self, other: BatchRows) -> None:
        """Append `other`'s rows, both right-aligned at the longer one's index."""
        if self.keys is None and other.keys is None:
            self._set_padding(mx.concatenate([self.left_padding, other.left_padding]))
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        template = self if self.keys is not None else other
        top = max(self.idx, other.idx)
        size = max(_columns(c.keys) for c in (self, other) if c.keys is not None)

        def aligned(cache: BatchRows):
            keys, values = cache.keys, cache.values
            if keys is None:
                rows = cache.offset.shape[0]
                keys, values = tree_map(
                    lambda x: mx.zeros((rows, x.shape[1], 0, x.shape[3]), dtype=x.dtype),
                    (template.keys, template.values),
                )
            left = top - cache.idx
            right = size - _columns(keys) - left
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
        self._set_padding(mx.concatenate([mine[2], theirs[2]]))
        self.idx = top

    def extract(self, row: int):
        """Row `row` as a single-sequence cache of its own (mlx-lm's class)."""
        single = self._row_cache()
        padding = self.left_padding.tolist()[row]
        single.keys, single.values = tree_map(
            lambda x: mx.contiguous(x[row : row + 1, :, padding : self.idx]),
            (self.keys, self.values),
        )
        single.offset = self.idx - padding
        return single

    @classmethod
    def _merged(cls, caches: list, **options) -> BatchRows:
        """One batch of single-sequence caches, left-padded to the longest."""
        lengths = [c.offset if c.keys is not None else 0 for c in caches]
        longest = max(lengths)
        merged = cls([longest - length for length in lengths], **options)
        if longest == 0:
            return merged
        template = next(c for c in caches if c.keys is not None)
        merged.keys, merged.values = tree_map(
            lambda x: mx.zeros((len(caches), x.shape[1], longest, x.shape[3]), dtype=x.dtype),
            (template.keys, template.values),
        )
        targets = _leaves(merged.keys, merged.values)
        for row, (length, cache) in enumerate(zip(lengths, caches, strict=True)):
            if not length:
                continue
            pad = longest - length
            for target, source in zip(targets, _leaves(cache.keys, cache.values), strict=True):
                target[row : row + 1, :, pad:longest] = source[..., :length, :]
        merged.offset = merged.offset + longest
        merged.idx = longest
        return merged


class RowsKVCache(BatchRows):
    """Plain keys and values of shape (batch, heads, columns, head dim)."""

    def _blank(self, keys, values, columns):
        batch, heads = keys.shape[:2]
        return (
            mx.zeros((batch, heads, columns, keys.shape[3]), keys.dtype),
            mx.zeros((batch, heads, columns, values.shape[3]), values.dtype),
        )

    def _write(self, start, keys, values) -> None:
        self.keys[..., start : self.idx, :] = keys
        self.values[..., start : self.idx, :] = values

    def keys_and_values(self):
        # Two arrays, sliced directly: tree_map's walk cost more than the slices, on every
        # layer of every step.
        return self.keys[..., : self.idx, :], self.values[..., : self.idx, :]

    def _row_cache(self) -> KVCache:
        return KVCache()

    def make_mask(self, N: int, return_array: bool = False, window_size=None, **kwargs):  # noqa: N803 (mlx-lm's)
        if not return_array and window_size is None and self.unpadded():
            if N == 1:
                return None
            if causal_prompt_steps():
                return "causal"  # the same triangle, offset by the keys already cached
        return create_causal_mask(
            N, offset=self.idx, left_padding=self.left_padding, window_size=window_size
        )

    @classmethod
    def merge(cls, caches: list[KVCache]) -> RowsKVCache:
        return cls._merged(caches)


class RowsQuantizedKVCache(BatchRows):
    """Keys and values as mx.quantize triples of shape (batch, heads, columns, ...):
    mlx-lm's QuantizedKVCache, a row a sequence."""

    def __init__(self, left_padding: list[int], *, group_size: int = 64, bits: int = 8) -> None:
        super().__init__(left_padding)
        self.group_size = group_size
        self.bits = bits

    @classmethod
    def from_rows(cls, cache: RowsKVCache, *, group_size: int, bits: int) -> RowsQuantizedKVCache:
        """A plain batch's rows quantized in its place (rows reaching their scheme's start),
        as mlx-lm's KVCache.to_quantized quantizes one sequence."""
        quantized = cls([], group_size=group_size, bits=bits)
        quantized._set_padding(cache.left_padding)
        quantized.offset, quantized.idx = cache.offset, cache.idx
        if cache.keys is not None:
            used = cache.keys_and_values()
            quantized.keys, quantized.values = (
                tuple(mx.quantize(x, group_size=group_size, bits=bits)) for x in used
            )
        return quantized

    def _blank(self, keys, values, columns):
        batch, heads = keys.shape[:2]
        per_word = 32 // self.bits

        def empty(dim: int) -> tuple:
            shape = (batch, heads, columns)
            groups = dim // self.group_size
            return (
                mx.zeros((*shape, dim // per_word), dtype=mx.uint32),
                mx.zeros((*shape, groups), dtype=keys.dtype),
                mx.zeros((*shape, groups), dtype=keys.dtype),
            )

        return empty(keys.shape[-1]), empty(values.shape[-1])

    def _write(self, start, keys, values) -> None:
        for stored, new in ((self.keys, keys), (self.values, values)):
            quantized = mx.quantize(new, group_size=self.group_size, bits=self.bits)
            for part, piece in zip(stored, quantized, strict=True):
                part[..., start : self.idx, :] = piece

    def _row_cache(self) -> QuantizedRowCache:
        return QuantizedRowCache(group_size=self.group_size, bits=self.bits)

    def make_mask(self, N: int, return_array: bool = False, window_size=None, **kwargs):  # noqa: N803 (mlx-lm's)
        return create_causal_mask(
            N, offset=self.idx, left_padding=self.left_padding, window_size=window_size
        )

    @classmethod
    def merge(cls, caches: list[QuantizedRowCache]) -> RowsQuantizedKVCache:
        first = caches[0]
        if any((c.group_size, c.bits) != (first.group_size, first.bits) for c in caches):
            raise ValueError("quantized caches of different schemes cannot share a batch")
        return cls._merged(caches, group_size=first.group_size, bits=first.bits)


class QuantizedRowCache(QuantizedKVCache):
    """One sequence's quantized cache (mlx-lm's), which merges into quantized rows."""

    def size(self) -> int:
        return self.offset

    @classmethod
    def merge(cls, caches: list) -> RowsQuantizedKVCache:
        return RowsQuantizedKVCache.merge(caches)


def quantize_row(cache: KVCache, *, group_size: int, bits: int) -> QuantizedRowCache:
    """An unquantized row cache quantized as mlx-lm's KVCache.to_quantized does."""
    row = QuantizedRowCache(group_size=group_size, bits=bits)
    row.offset = cache.offset
    if cache.keys is not None:
        row.keys = tuple(mx.quantize(cache.keys, group_size=group_size, bits=bits))
        row.values = tuple(mx.quantize(cache.values, group_size=group_size, bits=bits))
    return row


def batch_of(rows: list) -> object:
    """One layer's batch cache from its rows' single-sequence caches: ours for plain and
    quantized KV layers, mlx-lm's own merge for the others (rotating windows, recurrent
    state), which it batches through their public methods."""
    first = rows[0]
    if type(first) is KVCache:
        return RowsKVCache.merge(rows)
    return first.merge(rows)
