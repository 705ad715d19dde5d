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
plain step would see (acceleration/exact_attention.py): the logits are then bit-identical to decoding
token by token (tests/engine/test_speculative.py). The rows of a pass (batch x positions)
stay below the kernel's BLAS threshold for the same reason (EngineConfig.max_verify_rows).

Drafts come from prompt lookup and predictions (drafting.py), a draft model
(draft_model.py inline; companion.py asks a worker of its own) or a grammar's forced tokens
(fast-forwarding). A row decodes normally, without drafts, when: nothing matches its
history; its request uses a grammar and asks for logprobs; the batch is too wide for even
one draft per row within max_verify_rows; or its draft model's companion worker is down
or late. A model whose KV cache cannot be trimmed (sliding windows, state-space layers)
never drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.models.cache import KVCache, make_prompt_cache

from ..acceleration.exact_attention import exact_attention
from ..acceleration.fused_decode import FusedLayer
from ..drafts.companion import CompanionDrafter, CompanionLinks
from ..drafts.draft_model import DraftModels, ModelDrafter
from ..drafts.drafting import Drafter, ForcedDrafter
from ..drafts.fill import FillDrafter
from .rows import Generated, Row

AnyDrafter = Drafter | ForcedDrafter | ModelDrafter | CompanionDrafter | FillDrafter


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
    """What the runner shares with its generators' decoding rows: drafters by uid, limits."""

    max_rows: int = 15  # batch x positions of one verifying pass
    exact: bool = True
    enabled: bool = True  # False: the model cannot speculate (can_speculate)
    stop_tokens: frozenset[int] = frozenset()  # a row about to feed one ends: no drafts
    drafters: dict[int, AnyDrafter] = field(default_factory=dict)
    stats: DraftStats = field(default_factory=DraftStats)
    draft_models: DraftModels = field(default_factory=DraftModels)  # this worker's, by folder
    companions: CompanionLinks = field(default_factory=CompanionLinks)  # draft models' workers
    tokenizer: object = None  # the model's (mlx-lm's TokenizerWrapper): fill reads the text

    def drafter_for(self, request, grammar) -> AnyDrafter | None:
        """A new row's drafter: a grammar's forced tokens (fast-forwarding, not when
        logprobs are asked for), else its draft model or prompt lookup, else its tool
        calls' determined spans (fill); None where no draft could be verified. A draft
        model loads here on its first use, unless its companion worker runs it."""
        if not self.enabled or (grammar is not None and request.logprobs):
            return None
        if grammar is not None:
            return ForcedDrafter(grammar.forced_after)
        if request.draft is None:
            return self._filler(request)
        plan = request.draft
        if plan.method == "model" and plan.companion:
            return CompanionDrafter(self.companions, plan.companion, plan.num_draft_tokens)
        if plan.method == "model":
            return ModelDrafter(self.draft_models.model(plan.model_path), plan.num_draft_tokens)
        return Drafter(plan)

    def _filler(self, request) -> FillDrafter | None:
        plan = request.fill
        if plan is None or plan.refused:
            return None
        tokenizer = self.tokenizer
        return FillDrafter(
            plan,
            prompt_length=len(request.prompt_tokens),
            decode=tokenizer.decode,
            encode=lambda text: tokenizer.encode(text, add_special_tokens=False),
        )

    def forget(self, uid: int) -> None:
        """A row is done: its drafter goes (a companion's frees the row's cache there)."""
        drafter = self.drafters.pop(uid, None)
        if isinstance(drafter, CompanionDrafter):
            drafter.close()

    def step(self, decoding) -> list[Generated] | None:
        """A verifying pass over `decoding`'s rows where any has drafts; None for a plain step."""
        if not self.enabled or not self.drafters:
            return None
        plan = _drafts(self, decoding)
        if plan is None:
            return None
        return _verify(self, decoding, *plan)


def speculation_for(loaded, *, max_rows: int, exact: bool) -> Speculation:
    """A loaded model's speculation. Query-by-query attention buys bit-exact verification
    only where every matmul computes a row alike whatever the row count: the quantized
    kernel path, whose fused blocks compute attention that way; elsewhere verifying passes
    attend all at once."""
    layers = getattr(getattr(loaded.model, "model", None), "layers", None) or []
    fused = any(isinstance(block, FusedLayer) for block in layers)
    return Speculation(
        max_rows=max_rows,
        exact=exact and loaded.fast_path.path == "kernel" and fused,
        # A verifying pass does not carry a media row's positions (mRoPE): not drafted yet.
        enabled=max_rows >= 2 and not loaded.media and can_speculate(loaded.model),
        stop_tokens=frozenset(loaded.tokenizer.eos_token_ids),
        tokenizer=loaded.tokenizer,
    )


# -- drafting -----------------------------------------------------------------------


def _drafts(speculation: Speculation, decoding) -> tuple[list[int], list[list[int]]] | None:
    """The rows' pending tokens and drafts, or None for a plain step."""
    rows: list[Row] = decoding.rows
    drafters = [speculation.drafters.get(row.uid) for row in rows]
    if not any(drafters):
        return None
    width = speculation.max_rows // len(rows)  # positions a row may take
    if width < 2:
        return None
    pending = decoding.pending.tolist()
    drafts = []
    for row, token, drafter in zip(rows, pending, drafters, strict=True):
        # The pending token counts toward max_tokens (unless it went out already), and so
        # does each kept draft.
        room = min(width - 1, row.max_tokens - row.generated - (0 if row.handed else 1))
        if drafter is None or room < 1 or token in speculation.stop_tokens:
            drafts.append([])
            continue
        drafts.append(drafter.propose(row.tokens + [token], room))
    if not any(drafts):
        return None
    return pending, drafts


# -- the verifying pass ---------------------------------------------------------------


def _verify(speculation: Speculation, decoding, pending: list[int], drafts: list[list[int]]):
    rows: list[Row] = decoding.rows
    width = 1 + max(map(len, drafts))
    inputs = mx.array(
        [[p, *d, *[0] * (width - 1 - len(d))] for p, d in zip(pending, drafts, strict=True)]
    )
    with exact_attention(speculation.exact):
        logits = decoding.model(inputs, cache=decoding.caches)
    sampled, logprobs, taken = [], [], []
    for i, (row, token, draft) in enumerate(zip(rows, pending, drafts, strict=True)):
        taken.append([_taken(processor) for processor in row.processors])
        row_tokens, row_logprobs = _sample_row(
            decoding, row, logits[i, : 1 + len(draft)], token, draft
        )
        sampled.append(row_tokens)
        logprobs.append(row_logprobs)
    mx.eval(sampled)
    kept = []
    for i, (row, draft) in enumerate(zip(rows, drafts, strict=True)):
        tokens = sampled[i].tolist()
        count = 0
        while count < len(draft) and tokens[count] == draft[count]:
            count += 1
        kept.append(count)
        _settle_row(row, len(draft), count, taken[i])
        drafter = speculation.drafters.get(row.uid)
        if drafter is not None and draft:
            drafter.observe(len(draft), count)
            if getattr(drafter, "fast_forward", False):
                speculation.stats.fast_forwarded += count
        sampled[i] = tokens
    speculation.stats.steps += 1
    speculation.stats.drafted += sum(map(len, drafts))
    speculation.stats.accepted += sum(kept)
    _drop_refused(decoding.caches, [width - 1 - count for count in kept])
    return _respond(decoding, pending, drafts, kept, sampled, logprobs)


def _sample_row(decoding, row: Row, logits: mx.array, token: int, draft: list[int]):
    """Every position of `row` sampled as plain steps would, in order."""
    positions = logits.shape[0]
    if row.processors:
        context = row.context.update_and_fetch(mx.array([token, *draft]))
        base_length = context.shape[0] - positions
        processed = []
        for j in range(positions):
            position = logits[j : j + 1]
            for processor in row.processors:
                position = processor(context[: base_length + j + 1], position)
            processed.append(position)
        logits = mx.concatenate(processed, axis=0)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    sampler = row.sampler or decoding.fallback_sampler
    if getattr(sampler, "rewind", None) is not None:  # seeded: one draw per position
        tokens = mx.concatenate([sampler(logprobs[j : j + 1]) for j in range(positions)])
    else:
        tokens = sampler(logprobs)
    return tokens, logprobs


def _settle_row(row: Row, drafted: int, kept: int, taken: list) -> None:
    """Take back what the row's processors and sampler saw of its refused positions."""
    refused = drafted - kept
    for processor, before in zip(row.processors, taken, strict=True):
        inner = getattr(processor, "inner", processor)
        if before is not None:  # a grammar: keep what it took of p and the kept drafts
            inner.rollback(inner.accepted - min(inner.accepted, before + 1 + kept))
    if not refused:
        return
    if row.context is not None:
        row.context.rewind(refused)
    rewind = getattr(row.sampler, "rewind", None)
    if rewind is not None:
        rewind(refused)


def _drop_refused(caches: list, refused: list[int]) -> None:
    """Drop each row's refused positions (and padding) from the end of its cache: rows
    share one index, so the batch trims what all dropped, and the rows that dropped more
    move right, their left padding growing by as much."""
    common = min(refused)
    shifts = [count - common for count in refused]
    for cache in caches:
        if common:
            cache.trim(common)
        if any(shifts):
            cache.prepare(right_padding=shifts)
            cache.finalize()


def _respond(decoding, pending, drafts, kept, sampled, logprobs) -> list[Generated]:
    responses, keep, next_tokens, next_logprobs = [], [], [], {}
    wanted = decoding.logprob_uids
    for i, row in enumerate(decoding.rows):
        emitted = [pending[i], *drafts[i][: kept[i]]]
        distributions = [
            decoding.pending_logprobs.get(row.uid),
            *(logprobs[i][j] for j in range(kept[i])),
        ]
        next_tokens.append(sampled[i][kept[i]])
        if row.uid in wanted:
            next_logprobs[row.uid] = logprobs[i][kept[i]]
        finished = False
        for position, (token, distribution) in enumerate(zip(emitted, distributions, strict=True)):
            row.tokens.append(token)
            if position == 0 and row.handed:  # its first token, out when it joined
                row.handed = False
                continue
            reason = row.count(token)
            unused = len(emitted) - 1 - position
            responses.append(
                decoding.respond(
                    i, token, distribution, reason, unused=unused, drafted=position > 0
                )
            )
            if reason is not None:
                finished = True
                break
        if not finished:
            keep.append(i)
    decoding.pending = mx.array(next_tokens)
    decoding.pending_logprobs = next_logprobs
    decoding.filter(keep)
    return responses
