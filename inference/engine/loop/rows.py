"""What the batch keeps for each sequence outside its arrays, and what a step hands out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.generate import StopSequences


class TokenContext:
    """A row's tokens as one array, for its logits processors (penalties read them):
    grown 256 at a time, and taken back when a verifying pass refuses drafts."""

    step = 256

    def __init__(self, tokens: list[int]) -> None:
        self._buffer = mx.array(tokens, dtype=mx.int32)
        self._size = len(tokens)

    def update_and_fetch(self, tokens: mx.array) -> mx.array:
        start, end = self._size, self._size + len(tokens)
        grown = (end + self.step - 1) // self.step * self.step
        if grown > self._buffer.size:
            padding = mx.zeros(grown - self._buffer.size, dtype=mx.int32)
            self._buffer = mx.concatenate([self._buffer, padding])
        self._buffer[start:end] = tokens
        self._size = end
        return self._buffer[:end]

    def rewind(self, count: int) -> None:
        self._size -= count


@dataclass(eq=False)
class Row:
    """One sequence of the batch."""

    uid: int
    tokens: list[int]  # what its KV cache holds, in order
    max_tokens: int
    sampler: Callable | None  # None: the generator's fallback (greedy)
    processors: tuple
    matcher: StopSequences.Matcher
    segments: list[list[int]] = field(default_factory=list)  # prompt left to prefill
    cache: list | None = None  # its own cache, until it joins the prefill batch
    prefilled: int = 0  # prompt tokens computed, of `total`
    total: int = 0
    generated: int = 0  # tokens handed out
    handed: bool = False  # the token it feeds next went out already (its first)
    context: TokenContext | None = None  # where it has processors
    media: object | None = None  # a media row's prefill inputs (media/rows.py RowMedia)
    position_delta: int = 0  # its positions less their indices past the prompt (mRoPE)

    @property
    def ready(self) -> bool:
        """Whether its prompt is down to the last token (fed by the forward that samples
        its first token)."""
        return len(self.segments) == 1 and len(self.segments[0]) == 1

    def count(self, token: int) -> str | None:
        """Hand out `token`: its finish reason, or None while it goes on."""
        self.generated += 1
        reason = "length" if self.generated >= self.max_tokens else None
        if self.matcher.advance(token):
            reason = "stop"
        return reason


@dataclass
class Generated:
    """A token handed out; a finished row's last brings its cache and tokens."""

    uid: int
    token: int
    logprobs: mx.array | None  # the distribution it was drawn from, where the row reads it
    finish_reason: str | None
    prompt_cache: list | None = None
    all_tokens: list[int] | None = None
    drafted: bool = False  # a kept draft


@dataclass
class PromptProgress:
    """A prompt step's news of one row: tokens computed, and whether a segment (or the
    whole prompt) ended."""

    uid: int
    progress: tuple[int, int]
    end_of_segment: bool
    end_of_prompt: bool
