"""What a generation streams back, from the worker's engine to the web side's renderers."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int]


@dataclass(frozen=True)
class TokenLogprob:
    """The chosen token's log-probability and its most likely alternatives."""

    token_id: int
    token: str
    logprob: float
    bytes: list[int]
    top: list[TopLogprob]


@dataclass(frozen=True)
class TextDelta:
    """New text, safe to show: it can no longer turn into a stop sequence."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class ReasoningDelta:
    """New text of the model's reasoning (a `<think>` block), apart from the answer."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """One complete, parsed call of a tool the request offered."""

    id: str
    name: str
    arguments: str  # a JSON object, as text


@dataclass(frozen=True)
class FillUsage:
    """Token fast-forwarding's account of one request (MLXLAB_FILL, docs/API.md): the
    filled tokens in the completion, all it drafted, whether a tool-call parse failure
    disarmed it, or why it did not fill at all."""

    mode: str  # strict | echo
    filled_tokens: int = 0
    proposed_tokens: int = 0
    parse_fallback: bool = False
    refused: str | None = None  # logprobs | grammar | draft | media | template | model


@dataclass(frozen=True)
class Finished:
    """The sequence ended; always the last event of a successful generation."""

    # "stop" | "length" | "tool_calls"; "cancelled": the tally of a request whose client
    # left, for the web side's accounting alone (no client reads it).
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    stop_sequence: str | None = None
    resumed_from: int = 0  # completion tokens replayed from a checkpoint (0: not resumed)
    # Speculative decoding: whether the request drafted, and its drafted tokens that are
    # in the completion (accepted) or not (rejected); the two add up to all it drafted.
    speculative: bool = False
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0
    fast_forwarded_tokens: int = 0  # a grammar's forced tokens, verified in one pass
    fill: FillUsage | None = None  # a request with tools, while MLXLAB_FILL is on


@dataclass(frozen=True)
class Failed:
    """The sequence could not be completed; the last event of a failed generation."""

    message: str


Event = TextDelta | ReasoningDelta | ToolCall | Finished | Failed
