"""A decode step without a log-probability row per token, where no row of the batch reads one.

mlx-lm's GenerationBatch (0.32.2) splits every step's (rows, vocabulary) log-probabilities
into one array per row and evaluates each of them, for the Response of each token. The
engine reads a row only for requests that ask for logprobs (sequence.py). Elsewhere the
split costs the host, every step, a Python array per row and an output per row for MLX to
evaluate twice (queued, then waited on): on a GPU the host bounds a batch's step, so that
is time off every step ("The engine's host work per step" in docs/BENCHMARKS.md's history:
git show 02df74b:docs/BENCHMARKS.md).

The step below is mlx-lm's `_step` less the split; the sampled tokens come from the same
operations, so greedy output is unchanged. Logits processors, or any row that reads its
logprobs, take mlx-lm's own step.
"""

from __future__ import annotations

from collections.abc import Set

import mlx.core as mx


class LeanStep:
    """Mixin for mlx-lm's GenerationBatch: its `_step`, without per-row logprobs when unread."""

    # uids whose requests read their tokens' logprobs (the runner's set, shared by its lanes)
    logprob_uids: Set[int] = frozenset()

    def _step(self) -> tuple[list[int], list]:
        if any(self.logits_processors) or not self.logprob_uids.isdisjoint(self.uids):
            return super()._step()
        self._current_tokens = self._next_tokens
        self._current_logprobs = self._next_logprobs
        inputs = self._current_tokens
        logits = self.model(inputs[:, None], cache=self.prompt_cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        self._next_tokens = self._sample(logprobs)
        self._next_logprobs = [None] * len(self.uids)  # no Response reads them
        mx.async_eval(self._next_tokens)
        # The next step is queued: the host reads this one's tokens while it runs.
        tokens = inputs.tolist()
        for row, token in zip(self.tokens, tokens, strict=True):
            row.append(token)
        return tokens, self._current_logprobs

    def _sample(self, logprobs: mx.array) -> mx.array:
        """mlx-lm's: one call when every row shares a sampler, else one per row."""
        samplers = [
            self.fallback_sampler if s is None else s
            for s in (self.samplers or [None] * len(self.uids))
        ]
        if not samplers or all(s is samplers[0] for s in samplers):
            return (samplers[0] if samplers else self.fallback_sampler)(logprobs)
        return mx.concatenate([s(logprobs[e : e + 1]) for e, s in enumerate(samplers)], axis=0)
