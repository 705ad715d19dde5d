"""A prompt's first token out in the call that finished its prefill, not two calls later.

mlx-lm's BatchGenerator (0.32.x) prefills a prompt less its last token; the next call
moves the row into the generation batch, whose construction feeds that last token (the
forward that samples the first token); only the call after that, whose step feeds the
first token, hands it out. So the first token waited for two more calls of the runner:
their steps for every row already decoding, and the host's work of queueing the next
forward before the step returns, since a step hands out the token it feeds.

Here the move happens in the call that finished the prefill (`FirstTokenSooner`), and the
generation batch hands out a joining row's first token as it joins, once its forward is
done (`HandsOutFirstTokens`): the stop tokens and max_tokens checked as the step checks
them, a row that ends on it leaving with its cache. The step that later feeds that token
does its bookkeeping as ever, and its response for it is dropped. Every operation is
mlx-lm's own, for each row in the same order and batch as before, so the tokens are the
same; only when the first one goes out changes.

A row whose prompt segment ended this call moves on in the same call, so what reads the
caches of finished segments (the prompt cache's boundaries) runs in between, through
`after_prefill`: the row is still in the prompt batch then, its cache the segment's own.

This reaches into BatchGenerator's prompt bookkeeping (`_currently_processing`) and the
generation batch's rows, as their own code does: neither has a public hook for this.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.generate import GenerationBatch, PromptProcessingBatch


class FirstTokenSooner:
    """Mixin for mlx-lm's BatchGenerator: first tokens in the call their prefill ends."""

    # (generator, the call's prompt responses), after its prefill, before rows move on
    after_prefill: Callable[[object, list], None] | None = None

    def _next(self):
        prompt_responses, generated = super()._next()
        if self.after_prefill is not None:
            self.after_prefill(self, prompt_responses)
        prompt_responses += self._join_prefilled()
        return prompt_responses, generated + self._generation_batch.take_first_tokens()

    def _join_prefilled(self) -> list:
        """Move the rows whose prompt is down to its last token into the generation batch
        (BatchGenerator._next's own move, one call sooner); their prompt responses."""
        processing = self._currently_processing
        room = self.completion_batch_size - len(self._generation_batch)  # as mlx-lm holds it
        split = [i for i, seq in enumerate(processing) if len(seq[0]) == 1 and len(seq[0][0]) == 1]
        split = split[: max(room, 0)]
        if not split:
            return []
        last_tokens = [processing[i][0][0] for i in split]
        totals = [processing[i][2] for i in split]
        self._currently_processing = [seq for i, seq in enumerate(processing) if i not in split]
        batch = self._split_off(split).generate(last_tokens)
        uids = list(batch.uids)  # before the rows that end on their first token leave it
        self._generation_batch.extend(batch)
        return [
            PromptProcessingBatch.Response(uid, (total, total), True, True)
            for uid, total in zip(uids, totals, strict=True)
        ]

    def _split_off(self, rows: list[int]) -> PromptProcessingBatch:
        """The prompt batch's `rows`, as its `split` gives them. When every row goes (a lone
        prompt, or a batch prefilled together), the batch itself, a new empty one left in its
        place: `split` deep-copies every layer's cache and filters both sides, and each
        layer's filter reads the left padding back from the device. On an H200 that was 1.7
        ms of an 11.6 ms first token ("Where a first token's time went" in docs/BENCHMARKS.md's
        history: git show 02df74b:docs/BENCHMARKS.md)."""
        whole = self._prompt_batch
        if len(rows) < len(whole.uids):
            return whole.split(rows)
        self._prompt_batch = PromptProcessingBatch.empty(
            whole.model, whole.fallback_sampler, prefill_step_size=whole.prefill_step_size
        )
        return whole


class HandsOutFirstTokens:
    """Mixin for mlx-lm's GenerationBatch: a joining row's first token out as it joins."""

    def __init__(self, *args, **kwargs) -> None:
        self._first: list[GenerationBatch.Response] = []  # handed out, not yet taken
        self._handed: set[int] = set()  # uids whose pending token already went out
        super().__init__(*args, **kwargs)

    def take_first_tokens(self) -> list[GenerationBatch.Response]:
        first, self._first = self._first, []
        return first

    def extend(self, batch) -> None:
        # Rows moved between batches (kv_lanes.py) bring their handed-out mark along.
        moved = getattr(batch, "_handed", set()) & set(batch.uids)
        self._handed |= moved
        fresh = [
            i for i, uid in enumerate(batch.uids) if batch._num_tokens[i] == 0 and uid not in moved
        ]
        if fresh:
            self._hand_out(batch, fresh)
        if batch.uids:
            super().extend(batch)

    def next(self) -> list:
        if not self._handed:
            return super().next()
        self._handed &= set(self.uids)  # rows removed since
        responses = super().next()
        kept = []
        for response in responses:
            if response.uid in self._handed:  # the token it fed went out when it joined
                self._handed.discard(response.uid)
                continue
            kept.append(response)
        return kept

    def _hand_out(self, batch, fresh: list[int]) -> None:
        """Hand out the sampled first token of `batch`'s rows `fresh`; the rows that end on
        it leave `batch`, their caches with them."""
        mx.eval(batch._next_tokens)
        tokens = batch._next_tokens.tolist()
        ended = []
        for i in fresh:
            token, uid = tokens[i], batch.uids[i]
            reason = "length" if batch.max_tokens[i] <= 1 else None
            if copy.copy(batch._matchers[i]).advance(token):  # the step advances its own
                reason = "stop"
            logprobs = batch._next_logprobs[i] if batch._next_logprobs else None
            done = reason is not None
            self._first.append(
                GenerationBatch.Response(
                    uid=uid,
                    token=token,
                    logprobs=logprobs,
                    finish_reason=reason,
                    prompt_cache=batch.extract_cache(i) if done else None,
                    all_tokens=batch.tokens[i] if done else None,
                )
            )
            if done:
                ended.append(i)
            else:
                self._handed.add(uid)
        if ended:
            batch.filter([i for i in range(len(batch.uids)) if i not in ended])
