"""One sequence's life after sampling: detokenize, stop, logprobs, events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer

from ...protocol.events import Event, FillUsage, Finished, TokenLogprob, TopLogprob
from ..drafts.fill import FillDrafter
from ..prompting.output_parser import OutputFormat, OutputParser
from ..prompting.request import GenerationRequest
from .stop import StopMatcher

log = logging.getLogger(__name__)


def _faithful(detokenizer):
    """Keep the first token's leading space.

    mlx-lm's streaming detokenizers drop it while their text is empty, which
    turns the completion of "The capital of France is" into "Paris" instead of
    " Paris". Starting from a placeholder character (never emitted: the offset
    skips it) keeps the decoded text faithful to the tokens.
    """
    if isinstance(detokenizer, BPEStreamingDetokenizer | SPMStreamingDetokenizer):
        detokenizer.text, detokenizer.offset = "\x00", 1
    return detokenizer


@dataclass(frozen=True)
class ReadLogprob:
    """A token's log-probability and its most likely alternatives, read from the device."""

    logprob: float
    top: list[tuple[int, float]]  # (token id, log-probability), most likely first


def read_logprobs(rows: list[mx.array], tokens: list[int], counts: list[int]) -> list[ReadLogprob]:
    """Each row's chosen-token logprob and its top `counts[i]`, read in one transfer.

    Read row by row, every `.item()` and `.tolist()` waits for the device, where the next
    step is already queued: a batch of rows asking for logprobs would wait on it once per
    row per step. Stacked, the batch waits once.
    """
    stacked = mx.stack(rows)
    chosen = mx.take_along_axis(stacked, mx.array(tokens)[:, None], axis=-1)[:, 0]
    most = max(counts)
    if most == 0:
        return [ReadLogprob(value, []) for value in chosen.tolist()]
    # argpartition then sort: the full vocabulary sort is needless work.
    ids = mx.argpartition(-stacked, kth=most - 1, axis=-1)[:, :most]
    values = mx.take_along_axis(stacked, ids, axis=-1)
    order = mx.argsort(-values, axis=-1)
    ids, values = (
        mx.take_along_axis(ids, order, axis=-1),
        mx.take_along_axis(values, order, axis=-1),
    )
    mx.eval(chosen, ids, values)
    return [
        ReadLogprob(value, list(zip(row_ids[:count], row_values[:count], strict=True)))
        for value, row_ids, row_values, count in zip(
            chosen.tolist(), ids.tolist(), values.tolist(), counts, strict=True
        )
    ]


def step_logprobs(responses: list, active: Mapping[int, Sequence]) -> dict[int, ReadLogprob]:
    """By response index, the logprobs of a step's tokens whose requests show them, in one
    read from the device (read_logprobs). A failed read leaves them out: those rows then
    fail alone, when their tokens are turned into events."""
    wanted = []
    for index, response in enumerate(responses):
        sequence = active.get(response.uid)
        if sequence is not None and sequence.request.logprobs:
            wanted.append((index, response, sequence.request.top_logprobs))
    if not wanted:
        return {}
    try:
        values = read_logprobs(
            [response.logprobs for _, response, _ in wanted],
            [response.token for _, response, _ in wanted],
            [count for _, _, count in wanted],
        )
    except Exception:
        log.exception("reading the step's logprobs failed")
        return {}
    return {index: value for (index, _, _), value in zip(wanted, values, strict=True)}


@dataclass
class Sequence:
    """The engine's record of one request while it is in the batch."""

    request_id: int
    request: GenerationRequest
    emit: Callable[[Event], None]
    tokenizer: object  # mlx_lm TokenizerWrapper
    detokenizer: object = None
    stop: StopMatcher = None
    completion_tokens: int = 0
    cached_tokens: int = 0
    tokens: list[int] = field(default_factory=list)  # generated, for its checkpoints
    resumed_from: int = 0  # tokens replayed from a checkpoint
    saved: int = 0  # tokens its checkpoint holds on disk (or queued for it)
    checkpointing: bool = False  # the runner writes its checkpoints
    pending_logprobs: list[TokenLogprob] = field(default_factory=list)
    done: bool = False
    error: Exception | None = None  # set by a failing sampler or logits processor
    drafter: object = None  # drafting.Drafter, when the request drafts
    accepted_drafts: int = 0  # drafted tokens taken into the completion

    def __post_init__(self) -> None:
        self.detokenizer = _faithful(self.tokenizer.detokenizer)
        self.stop = StopMatcher(self.request.stop)
        output = self.request.output or OutputFormat()
        self.parser = OutputParser(output, self.emit, on_fallback=self._parse_fallback)

    def on_token(
        self,
        token: int,
        logprob: ReadLogprob | None,
        finish_reason: str | None,
        *,
        drafted: bool = False,
        replayed: bool = False,
    ) -> bool:
        """Turn one sampled token into events. Returns True when the sequence ended.

        `logprob`: the token's, read for the batch (read_logprobs), when the request asks.
        `replayed`: an earlier attempt's token (a resumed generation): a checkpoint keeps
        tokens, not their distributions, so it goes out without a logprob entry.

        mlx-lm reports finish_reason "stop" on an end-of-sequence token, which is
        never shown; a text stop sequence ends the sequence here instead. `drafted`: the
        token was a draft the model kept (speculative.py).
        """
        self.completion_tokens += 1
        self.tokens.append(token)
        self.accepted_drafts += drafted
        is_eos = finish_reason == "stop"
        if not is_eos and self.parser.takes_sentinel(token):
            self._sentinel(token)
        elif not is_eos:
            self.detokenizer.add_token(token)
            if self.request.logprobs and not replayed:
                self.pending_logprobs.append(self._logprob(token, logprob))
        if finish_reason is not None:
            self.detokenizer.finalize()
        self._release(self.stop.feed(self.detokenizer.last_segment))
        if self.stop.matched is not None:
            self._finish("stop")
        elif finish_reason is not None:
            self._release(self.stop.flush())
            self._finish(finish_reason)
        return self.done

    def replay(self, tokens: tuple[int, ...]) -> None:
        """Emit what an earlier attempt generated, at once, as it streamed then."""
        for token in tokens:
            self.on_token(token, None, None, replayed=True)
        self.resumed_from = self.saved = len(tokens)

    def _sentinel(self, token: int) -> None:
        """A tool call's own token: the text before it goes out first (a stop sequence
        never spans it), then it opens or closes the call; its text is never decoded."""
        self.detokenizer.finalize()
        self._release(self.stop.feed(self.detokenizer.last_segment))
        if self.stop.matched is None:
            self._release(self.stop.flush())
            self.parser.sentinel(token)

    def _release(self, text: str) -> None:
        if text:
            self.parser.feed(text, self.pending_logprobs)
            self.pending_logprobs = []

    def cancelled(self) -> None:
        """The client left: its tally alone (no more text), so what it cost is counted."""
        self.done = True
        self.emit(self._tally("cancelled"))

    def _finish(self, reason: str) -> None:
        self.done = True
        self.parser.finish()
        if self.parser.tool_calls and reason == "stop":
            reason = "tool_calls"
        self.emit(self._tally(reason))

    def _parse_fallback(self) -> None:
        """A tool call's text did not parse: it went out as text, and fill stops here."""
        if isinstance(self.drafter, FillDrafter):
            self.drafter.disarm()

    def _fill(self) -> FillUsage | None:
        plan = self.request.fill
        if plan is None:
            return None
        if isinstance(self.drafter, FillDrafter):
            return self.drafter.usage(self.accepted_drafts)
        # Planned but not drafting: the model cannot drop tokens from its cache.
        return FillUsage(mode=plan.mode, refused=plan.refused or "model")

    def _tally(self, reason: str) -> Finished:
        forced = getattr(self.drafter, "fast_forward", False)
        filling = isinstance(self.drafter, FillDrafter)
        predicted = self.drafter is not None and not forced and not filling
        return Finished(
            finish_reason=reason,
            prompt_tokens=len(self.request.prompt_tokens),
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            stop_sequence=self.stop.matched,
            resumed_from=self.resumed_from,
            speculative=self.request.draft is not None,
            accepted_prediction_tokens=self.accepted_drafts if predicted else 0,
            rejected_prediction_tokens=self.drafter.proposed - self.accepted_drafts
            if predicted
            else 0,
            fast_forwarded_tokens=self.accepted_drafts if forced else 0,
            fill=self._fill(),
        )

    def _logprob(self, token: int, read: ReadLogprob) -> TokenLogprob:
        top = [self._top_entry(i, v) for i, v in read.top[: self.request.top_logprobs]]
        text = self._token_text(token)
        return TokenLogprob(
            token_id=token,
            token=text,
            logprob=read.logprob,
            bytes=list(text.encode()),
            top=top,
        )

    def _top_entry(self, token: int, logprob: float) -> TopLogprob:
        text = self._token_text(token)
        return TopLogprob(token=text, logprob=logprob, bytes=list(text.encode()))

    def _token_text(self, token: int) -> str:
        return self.tokenizer.decode([token])
