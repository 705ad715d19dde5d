"""Speculative decoding inside continuous batching: drafted tokens verified in the shared step.

mlx-lm's `speculative_generate_step` serves one sequence (mlx_lm.server turns batching off
for it). Here a row with drafts (drafting.py) and rows without share one forward pass: the
batch's input is `1 + k` positions wide, each row holding the token it was about to feed,
then its drafts, then padding. Every position is sampled as a plain step would sample it
(same processors, same sampler; a seeded row's draws keyed by the token's index); a row
keeps its drafts up to the first that differs from the model's own token, and that token
becomes its next input. For drafts that are fixed tokens (prompt lookup, a prediction),
this is the standard accept/resample rule: a draft `d` is kept with probability p(d), and
otherwise the token is drawn from p without d, since a draw from p that differs from d is
exactly that. So the output is the target model's own: greedy rows give the same tokens,
seeded rows the same draws, as without drafts.

After the pass each row drops what it did not keep from the KV cache. Rows share one
cache index, so the batch trims what every row dropped, and the rows that dropped more are
shifted right inside the cache (mlx-lm's own right-padding finalize), their left padding
growing by as much.

Exactness on the CPU: the quantized matmul kernel computes each row alike whatever the
row count (below its BLAS threshold), but the attention of `k + 1` queries sums in
another order than one query's (OpenBLAS blocks differently), which moved logits by
~1e-4. So a verifying pass computes attention one query at a time, each over the keys a
plain step would see (`exact_attention`): the logits are then bit-identical to decoding
token by token (tests/engine/test_speculative.py). The rows of a pass (batch x positions)
stay below the kernel's BLAS threshold for the same reason (EngineConfig.max_verify_rows).

Drafts come from prompt lookup and predictions (drafting.py), a draft model
(draft_model.py) or a grammar's forced tokens (fast-forwarding). A row decodes normally,
without drafts, when: nothing matches its history; its request uses a grammar and asks for
logprobs; or the batch is too wide for even one draft per row within max_verify_rows. A model whose KV cache cannot be trimmed
(sliding windows, state-space layers) never drafts.

This reaches into mlx-lm 0.32.2's GenerationBatch: it has no public hook for a step.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, GenerationBatch
from mlx_lm.models.cache import KVCache, make_prompt_cache

from ..drafts.draft_model import DraftModels, ModelDrafter
from ..drafts.drafting import Drafter, ForcedDrafter
from .exact_attention import exact_attention, install_exact_attention
from .first_token import FirstTokenSooner, HandsOutFirstTokens
from .lean_step import LeanStep

AnyDrafter = Drafter | ForcedDrafter | ModelDrafter


def _taken(processor) -> int | None:
    """How many tokens a stateful processor (a grammar) has taken; None for the others."""
    return getattr(getattr(processor, "inner", processor), "accepted", None)


def can_speculate(model) -> bool:
    """Whether the model's KV cache can drop tokens again (plain KV layers only)."""
    try:
        return all(type(cache) is KVCache for cache in make_prompt_cache(model))
    except Exception:
        return False


@dataclass
class DraftStats:
    steps: int = 0  # verifying passes
    drafted: int = 0
    accepted: int = 0
    fast_forwarded: int = 0  # of the accepted: a grammar's forced tokens


@dataclass
class Speculation:
    """What the runner shares with its generators' batches: drafters by uid, and limits."""

    max_rows: int = 15  # batch x positions of one verifying pass
    exact: bool = True
    enabled: bool = True  # False: the model cannot speculate (can_speculate)
    stop_tokens: frozenset[int] = frozenset()  # a row about to feed one ends: no drafts
    drafters: dict[int, AnyDrafter] = field(default_factory=dict)
    stats: DraftStats = field(default_factory=DraftStats)
    draft_models: DraftModels = field(default_factory=DraftModels)  # this worker's, by folder

    def drafter_for(self, request, grammar) -> AnyDrafter | None:
        """A new row's drafter: a grammar's forced tokens (fast-forwarding, not when
        logprobs are asked for), else its draft model or prompt lookup; None where no draft
        could be verified. A draft model loads here on its first use."""
        if not self.enabled or (grammar is not None and request.logprobs):
            return None
        if grammar is not None:
            return ForcedDrafter(grammar.forced_after)
        if request.draft is None:
            return None
        plan = request.draft
        if plan.method == "model":
            return ModelDrafter(self.draft_models.model(plan.model_path), plan.num_draft_tokens)
        return Drafter(plan)


def speculation_for(loaded, *, max_rows: int, exact: bool) -> Speculation:
    """A loaded model's speculation. Query-by-query attention buys bit-exact verification
    only where every matmul computes a row alike whatever the row count: the quantized
    kernel path; without a wrappable attention, verifying passes attend all at once."""
    exact = exact and loaded.fast_path.path == "kernel"
    speculation = Speculation(
        max_rows=max_rows,
        exact=exact,
        enabled=max_rows >= 2 and can_speculate(loaded.model),
        stop_tokens=frozenset(loaded.tokenizer.eos_token_ids),
    )
    if speculation.enabled and exact:
        speculation.exact = install_exact_attention(loaded.model)
    return speculation


class DraftedResponse(GenerationBatch.Response):
    """A generated token, and whether it was a kept draft."""

    def __init__(self, *args, drafted: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.drafted = drafted


class VerifyingBatch(LeanStep, GenerationBatch):
    """mlx-lm's generation batch, with a verifying step for the rows that have drafts (and
    plain steps without unread logprobs rows: lean_step.py)."""

    speculation: Speculation | None = None

    def next(self) -> list:
        if not self.uids:
            return []
        plan = self._drafts()
        if plan is None:
            return super().next()
        return self._verify(*plan)

    # -- drafting -------------------------------------------------------------------

    def _drafts(self) -> tuple[list[int], list[list[int]]] | None:
        """The rows' pending tokens and drafts, or None for a plain step."""
        speculation = self.speculation
        if speculation is None or not speculation.enabled or not speculation.drafters:
            return None
        drafters = [speculation.drafters.get(uid) for uid in self.uids]
        if not any(drafters):
            return None
        width = speculation.max_rows // len(self.uids)  # positions a row may take
        if width < 2:
            return None
        mx.eval(self._next_tokens)
        pending = self._next_tokens.tolist()
        drafts = []
        for i, drafter in enumerate(drafters):
            # The pending token counts toward max_tokens, and so does each kept draft.
            room = min(width - 1, self.max_tokens[i] - self._num_tokens[i] - 1)
            if drafter is None or room < 1 or pending[i] in speculation.stop_tokens:
                drafts.append([])
                continue
            drafts.append(drafter.propose(self.tokens[i] + [pending[i]], room))
        if not any(drafts):
            return None
        return pending, drafts

    # -- the verifying step ------------------------------------------------------------

    def _verify(self, pending: list[int], drafts: list[list[int]]) -> list:
        speculation = self.speculation
        width = 1 + max(map(len, drafts))
        inputs = mx.array(
            [[p, *d, *[0] * (width - 1 - len(d))] for p, d in zip(pending, drafts, strict=True)]
        )
        with exact_attention(speculation.exact):
            logits = self.model(inputs, cache=self.prompt_cache)
        sampled, logprobs, taken = [], [], []
        for i, (token, draft) in enumerate(zip(pending, drafts, strict=True)):
            processors = self.logits_processors[i] if self.logits_processors else ()
            taken.append([_taken(processor) for processor in processors])
            row_tokens, row_logprobs = self._sample_row(
                i, logits[i, : 1 + len(draft)], token, draft
            )
            sampled.append(row_tokens)
            logprobs.append(row_logprobs)
        mx.eval(sampled)
        kept = []
        for i, (row, draft) in enumerate(zip(sampled, drafts, strict=True)):
            row = row.tolist()
            count = 0
            while count < len(draft) and row[count] == draft[count]:
                count += 1
            kept.append(count)
            self._settle_row(i, len(draft), count, taken[i])
            drafter = speculation.drafters.get(self.uids[i])
            if drafter is not None and draft:
                drafter.observe(len(draft), count)
                if getattr(drafter, "fast_forward", False):
                    speculation.stats.fast_forwarded += count
            sampled[i] = row
        speculation.stats.steps += 1
        speculation.stats.drafted += sum(map(len, drafts))
        speculation.stats.accepted += sum(kept)
        self._drop_refused([width - 1 - count for count in kept])
        return self._respond(pending, drafts, kept, sampled, logprobs)

    def _sample_row(self, i: int, logits: mx.array, token: int, draft: list[int]):
        """Every position of row `i` sampled as plain steps would, in order."""
        positions = logits.shape[0]
        processors = self.logits_processors[i] if self.logits_processors else ()
        if processors:
            context = self._token_context[i].update_and_fetch(mx.array([token, *draft]))
            base_length = context.shape[0] - positions
            rows = []
            for j in range(positions):
                row = logits[j : j + 1]
                for processor in processors:
                    row = processor(context[: base_length + j + 1], row)
                rows.append(row)
            logits = mx.concatenate(rows, axis=0)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sampler = (self.samplers[i] if self.samplers else None) or self.fallback_sampler
        if getattr(sampler, "rewind", None) is not None:  # seeded: one draw per position
            tokens = mx.concatenate([sampler(logprobs[j : j + 1]) for j in range(positions)])
        else:
            tokens = sampler(logprobs)
        return tokens, logprobs

    def _settle_row(self, i: int, drafted: int, kept: int, taken: list) -> None:
        """Take back what row `i`'s processors and sampler saw of its refused positions."""
        refused = drafted - kept
        processors = self.logits_processors[i] if self.logits_processors else ()
        for processor, before in zip(processors, taken, strict=True):
            inner = getattr(processor, "inner", processor)
            if before is not None:  # a grammar: keep what it took of p and the kept drafts
                inner.rollback(inner.accepted - min(inner.accepted, before + 1 + kept))
        if not refused:
            return
        if processors:
            self._token_context[i]._size -= refused
        rewind = getattr(self.samplers[i] if self.samplers else None, "rewind", None)
        if rewind is not None:
            rewind(refused)

    def _drop_refused(self, refused: list[int]) -> None:
        """Drop each row's refused positions (and padding) from the end of its cache."""
        common = min(refused)
        shifts = [count - common for count in refused]
        for cache in self.prompt_cache:
            if common:
                cache.trim(common)
            if any(shifts):
                cache.prepare(right_padding=shifts)
                cache.finalize()

    def _respond(self, pending, drafts, kept, sampled, logprobs) -> list:
        responses, keep, next_tokens, next_logprobs = [], [], [], []
        for i in range(len(self.uids)):
            emitted = [pending[i], *drafts[i][: kept[i]]]
            rows = [self._next_logprobs[i], *(logprobs[i][j] for j in range(kept[i]))]
            next_tokens.append(sampled[i][kept[i]])
            next_logprobs.append(logprobs[i][kept[i]])
            finished = False
            for position, (token, row) in enumerate(zip(emitted, rows, strict=True)):
                self.tokens[i].append(token)
                self._num_tokens[i] += 1
                reason = "length" if self._num_tokens[i] >= self.max_tokens[i] else None
                if self._matchers[i].advance(token):
                    reason = "stop"
                cache = None
                if reason is not None:
                    finished = True
                    cache = self._finished_cache(i, unused=len(emitted) - 1 - position)
                responses.append(
                    DraftedResponse(
                        uid=self.uids[i],
                        token=token,
                        logprobs=row,
                        finish_reason=reason,
                        prompt_cache=cache,
                        all_tokens=self.tokens[i] if reason is not None else None,
                        drafted=position > 0,
                    )
                )
                if finished:
                    break
            if not finished:
                keep.append(i)
        self._next_tokens = mx.array(next_tokens)
        self._next_logprobs = next_logprobs
        if len(keep) < len(self.uids):
            self.filter(keep)
        return responses

    def _finished_cache(self, i: int, *, unused: int) -> list:
        """Row `i`'s cache, less the kept drafts after the token it finished on."""
        cache = self.extract_cache(i)
        if unused:
            for layer in cache:
                layer.trim(unused)
        return cache


class ServingBatch(HandsOutFirstTokens, VerifyingBatch):
    """The engine's generation batch: drafts verified, first tokens out as rows join."""


class SpeculativeGenerator(FirstTokenSooner, BatchGenerator):
    """mlx-lm's BatchGenerator whose generation batch verifies drafts (and whose rows
    start generating in the call their prefill ends: first_token.py)."""

    def __init__(
        self,
        model,
        *,
        speculation: Speculation,
        logprob_uids: Set[int] = frozenset(),
        **options,
    ) -> None:
        super().__init__(model, **options)
        batch = ServingBatch.empty(self.model, self.sampler)
        batch.speculation = speculation
        batch.logprob_uids = logprob_uids
        self._generation_batch = batch
