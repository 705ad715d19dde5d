"""No attention mask on decode steps of a batch that has no left padding.

mlx-lm's BatchKVCache builds a boolean mask on every step, even when one query attends to
every key of every row (no row is left-padded: one row alone, or prompts of one length).
On MLX's CUDA backend an array mask rules out the fused decode attention kernel (its
vector SDPA takes no array mask), so each layer falls back to a slower path: on an H200,
one stream of a 1B model decoded 1.4-1.5x faster without the mask, and a batch of 8 up
to 1.85x (docs/BENCHMARKS.md). The result is the same either way: the mask is all true.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

_INSTALLED = "_mlxlab_decode_mask"


def unpadded(cache: BatchKVCache) -> bool:
    """Whether no row of the batch is left-padded, remembered per left-padding array.

    `left_padding` changes only when rows join, leave or finish a prompt (a new array
    each time), so the host reads it once per change, not once per step.
    """
    padding = cache.left_padding
    seen = getattr(cache, "_mlxlab_padding_seen", None)
    if seen is None or seen[0] is not padding:
        seen = (padding, not mx.any(padding).item())
        cache._mlxlab_padding_seen = seen
    return seen[1]


def install() -> None:
    """Make BatchKVCache skip the mask where it cannot change the result; idempotent."""
    if getattr(BatchKVCache, _INSTALLED, False):
        return
    original = BatchKVCache.make_mask

    def make_mask(self, N: int, return_array: bool = False, **kwargs):  # noqa: N803 (mlx-lm's)
        if N == 1 and not return_array and kwargs.get("window_size") is None and unpadded(self):
            return None
        return original(self, N, return_array=return_array, **kwargs)

    make_mask.original = original  # what the tests compare against
    BatchKVCache.make_mask = make_mask
    setattr(BatchKVCache, _INSTALLED, True)
