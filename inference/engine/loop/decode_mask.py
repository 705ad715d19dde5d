"""No attention mask on decode steps of a batch that has no left padding, and on a GPU
MLX's own causal mask for its prompt steps.

mlx-lm's BatchKVCache builds a boolean mask on every step, even when one query attends to
every key of every row (no row is left-padded: one row alone, or prompts of one length).
On MLX's CUDA backend an array mask rules out the fused decode attention kernel (its
vector SDPA takes no array mask), so each layer falls back to a slower path: on an H200,
one stream of a 1B model decoded 1.4-1.5x faster without the mask, and a batch of 8 up
to 1.85x (docs/BENCHMARKS.md). The result is the same either way: the mask is all true.

A prompt step over such a batch (a lone prompt, or prompts prefilled together to one
length) gets the same triangle as MLX's "causal" mode, which mlx-lm's single-stream cache
asks for: on CUDA that mode reaches cuDNN's causal attention, while an array mask takes
the path that materialises every layer's scores. On the CPU, MLX builds the same mask
either way, so the array stays there, as do verifying passes (exact_attention.py's
query-by-query split wants it).
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from .exact_attention import exact_attention_on

_INSTALLED = "_mlxlab_decode_mask"
# Prompt steps of an unpadded batch in MLX's "causal" mode: None (the default) on a GPU
# only; True or False everywhere (the tests, and bench/first_token.py's A/B).
CAUSAL_PROMPT_STEPS: bool | None = None


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


def causal_prompt_steps() -> bool:
    """Whether an unpadded batch's prompt steps ask MLX for its "causal" mode."""
    if CAUSAL_PROMPT_STEPS is not None:
        return CAUSAL_PROMPT_STEPS
    return mx.default_device() == mx.gpu


def install() -> None:
    """Make BatchKVCache skip its mask, or ask for MLX's causal mode, where that cannot
    change the result; idempotent."""
    if getattr(BatchKVCache, _INSTALLED, False):
        return
    original = BatchKVCache.make_mask

    def make_mask(self, N: int, return_array: bool = False, **kwargs):  # noqa: N803 (mlx-lm's)
        if not return_array and kwargs.get("window_size") is None:
            if N == 1 and unpadded(self):
                return None
            if N > 1 and causal_prompt_steps() and not exact_attention_on() and unpadded(self):
                return "causal"  # the same triangle, offset by the keys already cached
        return original(self, N, return_array=return_array, **kwargs)

    make_mask.original = original  # what the tests compare against
    BatchKVCache.make_mask = make_mask
    setattr(BatchKVCache, _INSTALLED, True)
