"""The decoding rows: one forward a step over every row, each sampled as its request says.

A step feeds each row its pending token, samples the next one and queues it on the
device before reading the tokens it fed: the host turns one step's tokens into events
while the device computes the next (on a GPU the host bounds a small batch's step).

A row joins with its prompt's last token: the forward that feeds it samples the first
token, which goes out at once (`join`) rather than a step later; the step that then feeds
it hands nothing out for it (`Row.handed`).

Only the rows whose requests read logprobs keep a distribution a step: an array per row
costs the host, every step, an output for MLX to evaluate, and most rows never read one.
Logits processors (bias, penalties, a grammar) see the row's tokens so far
(`TokenContext`); a failing one is the runner's to catch (sampling.guarded).
"""

from __future__ import annotations

from collections.abc import Callable, Set

import mlx.core as mx

from ..media.rows import step_inputs
from . import batch_caches
from .rows import Generated, Row, TokenContext

CLEAR_CACHE_EVERY = 512  # steps between returning MLX's freed buffers (as mlx-lm does)


class Decoding:
    """The generating rows, their caches, and the tokens they feed next."""

    def __init__(
        self,
        model,
        fallback_sampler: Callable,
        *,
        logprob_uids: Set[int] = frozenset(),
        speculation=None,
    ) -> None:
        self.model = model
        self.fallback_sampler = fallback_sampler
        self.logprob_uids = logprob_uids  # the runner's set: rows that read logprobs
        self.speculation = speculation  # speculative.Speculation, or None
        self.rows: list[Row] = []
        self.caches: list = []
        self.pending: mx.array | None = None  # (rows,): the tokens fed next
        self.pending_logprobs: dict[int, mx.array] = {}  # uid -> their distribution, if read
        self.steps = 0

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def uids(self) -> list[int]:
        return [row.uid for row in self.rows]

    # -- sampling -----------------------------------------------------------------

    def sample(self, rows: list[Row], logits: mx.array, inputs: mx.array):
        """(tokens, logprobs, contexts) of a forward's last positions: each row's
        processors, then its sampler; one call when every row shares a sampler."""
        contexts = []
        if any(row.processors for row in rows):
            processed = []
            for i, row in enumerate(rows):
                row_logits = logits[i : i + 1]
                if row.processors:
                    context = row.context.update_and_fetch(inputs[i : i + 1])
                    contexts.append(context)
                    for processor in row.processors:
                        row_logits = processor(context, row_logits)
                processed.append(row_logits)
            logits = mx.concatenate(processed, axis=0)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)  # lazy: built, not run
        if logits.dtype == mx.float32 and all(row.sampler is None for row in rows):
            # Greedy rows need no exp over the vocabulary (5-7% of a CPU decode step): in
            # float32, subtracting the row's logsumexp keeps the logits' order, and only two
            # within about 1e-6 could tie there (mlx-lm's greedy reads the logprobs).
            return mx.argmax(logits, axis=-1), logprobs, contexts
        samplers = [row.sampler or self.fallback_sampler for row in rows]
        if all(s is samplers[0] for s in samplers):
            return samplers[0](logprobs), logprobs, contexts
        tokens = [s(logprobs[i : i + 1]) for i, s in enumerate(samplers)]
        return mx.concatenate(tokens, axis=0), logprobs, contexts

    def read(self, rows: list[Row], logprobs: mx.array) -> dict[int, mx.array]:
        """The rows' distributions that their requests read."""
        wanted = self.logprob_uids
        return {row.uid: logprobs[i] for i, row in enumerate(rows) if row.uid in wanted}

    # -- joining ------------------------------------------------------------------

    def join(self, rows: list[Row], caches: list, last: list[int]) -> list[Generated]:
        """Rows whose prompts are down to `last`: feed it, hand out each first token,
        keep the rows that go on. A row that ends on its first token leaves with its cache."""
        for row in rows:
            if row.processors:
                row.context = TokenContext(row.tokens)
        inputs = mx.array(last)
        logits = self.model(inputs[:, None], cache=caches, **step_inputs(rows))[:, -1, :]
        tokens, logprobs, _ = self.sample(rows, logits, inputs)
        read = self.read(rows, logprobs)
        mx.eval(tokens)
        responses, keep = [], []
        for i, (row, token) in enumerate(zip(rows, tokens.tolist(), strict=True)):
            row.tokens.append(last[i])
            reason = row.count(token)
            done = reason is not None
            responses.append(
                Generated(
                    row.uid,
                    token,
                    read.get(row.uid),
                    reason,
                    prompt_cache=batch_caches.extract(caches, i) if done else None,
                    all_tokens=row.tokens if done else None,
                )
            )
            if not done:
                row.handed = True
                keep.append(i)
        if keep:
            kept = [rows[i] for i in keep]
            self.adopt(
                kept,
                batch_caches.filtered(caches, keep) if len(keep) < len(rows) else caches,
                tokens[mx.array(keep)] if len(keep) < len(rows) else tokens,
                {row.uid: read[row.uid] for row in kept if row.uid in read},
            )
        return responses

    def adopt(self, rows: list[Row], caches: list, pending: mx.array, logprobs: dict) -> None:
        """Take in generating rows (joined, or moved from another lane)."""
        self.rows += rows
        self.caches = batch_caches.extended(self.caches, caches)
        self.pending = pending if self.pending is None else mx.concatenate([self.pending, pending])
        self.pending_logprobs.update(logprobs)

    def take(self, indices: list[int]) -> tuple[list[Row], list, mx.array, dict]:
        """Split off rows `indices` (to move them to another lane): what `adopt` takes."""
        rest = [i for i in range(len(self.rows)) if i not in indices]
        rows = [self.rows[i] for i in indices]
        caches, self.caches = batch_caches.split(self.caches, indices, rest)
        pending = self.pending[mx.array(indices)]
        logprobs = {row.uid: self.pending_logprobs.pop(row.uid) for row in rows
                    if row.uid in self.pending_logprobs}  # fmt: skip
        self._keep_arrays(rest)
        self.rows = [self.rows[i] for i in rest]
        return rows, caches, pending, logprobs

    # -- one step -------------------------------------------------------------------

    def step(self) -> list[Generated]:
        """One step of every row: a verifying pass where rows have drafts, else a plain one."""
        if not self.rows:
            return []
        self.steps += 1
        if self.steps % CLEAR_CACHE_EVERY == 0:
            mx.clear_cache()
        if self.speculation is not None:
            responses = self.speculation.step(self)
            if responses is not None:
                return responses
        return self.plain_step()

    def plain_step(self) -> list[Generated]:
        inputs = self.pending
        logits = self.model(inputs[:, None], cache=self.caches, **step_inputs(self.rows))[:, -1, :]
        tokens, logprobs, contexts = self.sample(self.rows, logits, inputs)
        fed_logprobs = self.pending_logprobs
        self.pending, self.pending_logprobs = tokens, self.read(self.rows, logprobs)
        mx.async_eval(tokens, *self.pending_logprobs.values(), *contexts)
        # The next step is queued: the host reads this one's tokens while it runs.
        responses, keep = [], []
        for i, (row, token) in enumerate(zip(self.rows, inputs.tolist(), strict=True)):
            row.tokens.append(token)
            if row.handed:  # its first token, out when it joined
                row.handed = False
                keep.append(i)
                continue
            reason = row.count(token)
            responses.append(self.respond(i, token, fed_logprobs.get(row.uid), reason))
            if reason is None:
                keep.append(i)
        self.filter(keep)
        return responses

    def respond(self, i: int, token: int, logprobs, reason, *, unused: int = 0, drafted=False):
        """Row `i`'s response for `token`; a finished row's cache, less `unused` columns
        fed after its last token (kept drafts past a stop)."""
        row = self.rows[i]
        if reason is None:
            return Generated(row.uid, token, logprobs, None, drafted=drafted)
        cache = batch_caches.extract(self.caches, i)
        if unused:
            for layer in cache:
                layer.trim(unused)
        return Generated(row.uid, token, logprobs, reason, cache, row.tokens, drafted)

    def filter(self, keep: list[int]) -> None:
        """Keep rows `keep` (the others finished or left)."""
        if len(keep) == len(self.rows):
            return
        self.caches = batch_caches.filtered(self.caches, keep)
        self._keep_arrays(keep)
        self.rows = [self.rows[i] for i in keep]

    def _keep_arrays(self, keep: list[int]) -> None:
        self.pending = self.pending[mx.array(keep)] if keep else None
        uids = {self.rows[i].uid for i in keep}
        self.pending_logprobs = {u: a for u, a in self.pending_logprobs.items() if u in uids}

    def remove(self, uids: set[int]) -> None:
        self.filter([i for i, row in enumerate(self.rows) if row.uid not in uids])

    def extract(self, i: int) -> list:
        return batch_caches.extract(self.caches, i)
