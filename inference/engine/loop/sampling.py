"""Per-request samplers and logits processors, built on mlx-lm's own."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import mlx.core as mx
from mlx_lm.sample_utils import greedy_sampler, make_logits_processors, make_sampler

from ...protocol.sampling import SamplingParams
from .hlg import HlgProcessor

if TYPE_CHECKING:
    from .sequence import Sequence

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]

# Fresh entropy for the global MLX key after a seeded request borrowed it.
_entropy = random.SystemRandom()
# Distinct sampling settings kept for sharing; a row holds its own reference, so a clear
# only costs the next rows one build.
MAX_SHARED_SAMPLERS = 64


def build_sampler(
    params: SamplingParams, *, xtc_special_tokens: list[int], step: int = 0
) -> Sampler:
    """mlx-lm's sampler, made reproducible per request when a seed is given.

    mlx_lm.server serves seeded requests one at a time because its samplers
    draw from the global key. Here a seeded request re-seeds the global key
    from (seed, step) just for its own row, so its draws do not depend on what
    else shares the batch, and a generation resumed at `step` (checkpoints.py) draws
    as the uninterrupted one did.
    """
    sampler = make_sampler(
        params.temperature,
        top_p=params.top_p,
        min_p=params.min_p,
        top_k=params.top_k,
        xtc_probability=params.xtc_probability,
        xtc_threshold=params.xtc_threshold,
        xtc_special_tokens=xtc_special_tokens,
    )
    if params.seed is None or params.is_greedy:
        return sampler
    return _seeded(sampler, params.seed, step)


def sampler_key(params: SamplingParams) -> tuple:
    """The fields `build_sampler` reads: equal keys make equal (unseeded) samplers."""
    return (
        params.temperature,
        params.top_p,
        params.min_p,
        params.top_k,
        params.xtc_probability,
        params.xtc_threshold,
    )


class _Seeded:
    """Draw the n-th token of a request from a key made of (seed, n), whatever the batch.

    `step` starts past the tokens a resumed generation already holds (checkpoints.py);
    `rewind` steps the count back over draws whose tokens were not kept (a verifying
    step samples every drafted position; speculative.py).
    """

    def __init__(self, sampler: Sampler, seed: int, step: int = 0) -> None:
        self.sampler, self.seed, self.step = sampler, seed, step

    def __call__(self, logprobs: mx.array) -> mx.array:
        mx.random.seed((self.seed * 1_000_003 + self.step) % (1 << 63))
        self.step += 1
        try:
            return self.sampler(logprobs)
        finally:
            mx.random.seed(_entropy.getrandbits(63))

    def rewind(self, draws: int) -> None:
        self.step -= draws


def _seeded(sampler: Sampler, seed: int, step: int) -> Sampler:
    return _Seeded(sampler, seed, step)


def build_logits_processors(
    params: SamplingParams, grammar: LogitsProcessor | None = None
) -> list[LogitsProcessor]:
    """Bias and penalties, as mlx_lm.server builds them; then the grammar's mask, so that
    bias cannot revive a masked token; then HLG's curve, so that its pivot is the top token
    the grammar allows (the curve keeps a masked token masked)."""
    processors = make_logits_processors(
        params.logit_bias,
        params.repetition_penalty,
        params.repetition_context_size,
        params.presence_penalty,
        params.presence_context_size,
        params.frequency_penalty,
        params.frequency_context_size,
    )
    if grammar is not None:
        processors.append(grammar)
    if params.hlg is not None:
        processors.append(HlgProcessor(params.hlg))
    return processors


def guarded(function: Callable, sequence: Sequence, *, fallback: Callable) -> Callable:
    """Run one request's sampler or logits processor inside the shared batch step.

    A failure is recorded on its own sequence (failed at postprocess) and the
    fallback keeps the step going, so the other rows of the batch never see it.
    """

    def call(*args):
        if sequence.error is None:
            try:
                return function(*args)
            except Exception as exc:
                sequence.error = exc
        return fallback(*args)

    if hasattr(function, "rewind"):  # a seeded sampler (sampling.py), for verifying steps
        call.rewind = function.rewind
    call.inner = function  # a grammar's matcher takes refused drafts back (speculative.py)
    return call


def unchanged(tokens, logits):
    return logits


class RowSamplers:
    """Each row's sampler; rows that sample alike share one, so the batch samples once.

    mlx-lm samples the whole batch in one call when every row holds the same sampler
    object, and row by row otherwise: on a GPU that is a kernel launch per row per step.
    Greedy rows take the generator's own (None); unseeded rows with equal settings share
    one. A seeded row re-seeds per step: its own.
    """

    def __init__(self, xtc_special_tokens: list[int]):
        self._xtc_special = xtc_special_tokens
        self._shared: dict[tuple, Sampler] = {}

    def for_row(
        self, params: SamplingParams, sequence: Sequence, *, step: int = 0
    ) -> Sampler | None:
        if params.is_greedy:
            return None
        if params.seed is not None:
            sampler = build_sampler(params, xtc_special_tokens=self._xtc_special, step=step)
            return guarded(sampler, sequence, fallback=greedy_sampler)
        key = sampler_key(params)
        if key not in self._shared:
            if len(self._shared) >= MAX_SHARED_SAMPLERS:  # clients choose the keys
                self._shared.clear()
            self._shared[key] = build_sampler(params, xtc_special_tokens=self._xtc_special)
        return self._shared[key]
