"""The protocol between the web process and a model worker, over ZeroMQ.

Every message is one msgpack frame `[kind, request id, payload]`; the payload's
type follows from `kind`, so each side decodes into typed values (msgspec
checks them) and never unpickles anything a peer sent. The web side is a DEALER
socket, the worker a ROUTER, so one worker can answer several web processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from .adapters import AdapterRef
from .embeddings import EmbedCall, Embedded, RerankCall, Reranked
from .events import Failed, Finished, ReasoningDelta, TextDelta, ToolCall
from .grammar import GrammarSpec
from .sampling import KVScheme, SamplingParams


@dataclass(frozen=True)
class ChatInput:
    """A chat turn as the web side validated it; the worker renders and tokenizes it."""

    messages: list[dict[str, Any]]
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)
    tool_choice: str = "none"  # auto | none | required | a function's name
    structured: GrammarSpec | None = None
    reasoning_effort: str | None = None  # for a template with a depth variable of its own


@dataclass(frozen=True)
class GenerateCall:
    """One request for a worker: a chat turn or a raw text prompt, and how to sample it.

    `count_only` asks for the prompt's length and no generation (count_tokens).
    """

    chat: ChatInput | None = None
    text: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    default_max_tokens: int = 512
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    adapters: tuple[AdapterRef, ...] = ()
    count_only: bool = False
    cache_scope: str = ""  # the caller, unless the prompt cache is shared (global)
    cache_session: str | None = None  # a prompt-cache session the client named
    kv: KVScheme | None = None  # a quantized KV cache; None: plain
    resumable: bool = True  # checkpointed, and resumed by an identical retry (checkpoints.py)
    draft_model: str | None = None  # "ngram", "none" or a model's name; None: ngram when predicting
    draft_path: str = ""  # a draft model's folder (draft_model names it)
    # The draft model's companion worker (its address), set by the supervisor: the target
    # asks it for drafts instead of loading the draft itself. "": the draft runs inline.
    draft_companion: str = ""
    num_draft_tokens: int | None = None
    prediction: str | None = None  # OpenAI's Predicted Outputs: text to draft from
    request_id: str = ""  # the web request's id, for the worker's log lines of it


@dataclass(frozen=True)
class Accepted:
    """The worker built the prompt and queued the generation (or only counted it)."""

    prompt_tokens: int
    warning: str | None = None
    resumed_from: int = 0  # completion tokens replayed from an earlier attempt's checkpoint


@dataclass(frozen=True)
class Rejected:
    """The request cannot be served as sent: a client error, with its field."""

    message: str
    param: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class WorkerStatus:
    """What a worker reports of itself: load, memory and counters."""

    model: str
    pid: int
    in_flight: int
    active_bytes: int
    cache_bytes: int
    peak_bytes: int
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AdapterCall:
    """An operator's mount (load an adapter ahead of use, keep it) or unmount (drop it) on
    a running worker; answered by AdapterState, or Rejected."""

    action: str  # "mount" | "unmount"
    adapter: AdapterRef


@dataclass(frozen=True)
class AdapterState:
    """A worker's adapters after a mount or unmount: those mounted, those loaded (mounted,
    or loaded by a request naming them); `deferred`: the one unmounted stays until the
    requests running under it finish."""

    mounted: list[str]
    loaded: list[str]
    deferred: bool = False


@dataclass(frozen=True)
class DraftCall:
    """A target's question to its companion (companion.py): the greedy continuation of a
    row's history, up to `limit` tokens. The companion keeps each row's history: the first
    `keep` tokens of what it holds stay, `tail` follows them."""

    row: int
    keep: int
    tail: list[int]
    limit: int


@dataclass(frozen=True)
class Drafts:
    """A companion's answer to a DraftCall."""

    tokens: list[int]


@dataclass(frozen=True)
class Empty:
    pass


EVENT_KINDS: dict[type, str] = {
    TextDelta: "text",
    ReasoningDelta: "reasoning",
    ToolCall: "tool",
    Finished: "finished",
    Failed: "failed",
}
PAYLOADS: dict[str, type] = {
    "generate": GenerateCall,
    "embed": EmbedCall,
    "embedded": Embedded,
    "rerank": RerankCall,
    "reranked": Reranked,
    "cancel": Empty,
    "report": Empty,
    "accepted": Accepted,
    "rejected": Rejected,
    "status": WorkerStatus,
    "adapter": AdapterCall,
    "adapters": AdapterState,
    "draft": DraftCall,
    "drafts": Drafts,
    "release": Empty,  # a companion's row (the request id) is done: its cache goes
    **{kind: event_type for event_type, kind in EVENT_KINDS.items()},
}

_encoder = msgspec.msgpack.Encoder()
_head = msgspec.msgpack.Decoder(tuple[str, int, msgspec.Raw])
_bodies = {kind: msgspec.msgpack.Decoder(payload) for kind, payload in PAYLOADS.items()}


class WireError(ValueError):
    """A frame that is not a message of this protocol."""


class Unencodable(WireError):
    """A message holding a value msgpack cannot carry: an integer past 64 bits, which JSON
    allows anywhere a client passes values through (a message's extra fields, a schema)."""


# What a web process asks of a worker, and the kind of the message that carries each.
WorkerCall = GenerateCall | EmbedCall | RerankCall
CALL_KINDS: dict[type, str] = {GenerateCall: "generate", EmbedCall: "embed", RerankCall: "rerank"}


def encode(kind: str, request_id: int, payload: object = Empty()) -> bytes:
    try:
        return _encoder.encode((kind, request_id, payload))
    except OverflowError:
        raise Unencodable("an integer outside the 64-bit range") from None


def encode_event(request_id: int, event: object) -> bytes:
    return _encoder.encode((EVENT_KINDS[type(event)], request_id, event))


def decode(frame: bytes) -> tuple[str, int, object]:
    """`(kind, request id, payload)`; a frame of another shape is a WireError."""
    try:
        kind, request_id, body = _head.decode(frame)
        decoder = _bodies.get(kind)
        if decoder is None:
            raise WireError(f"unknown message kind {kind!r}")
        return kind, request_id, decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise WireError(str(exc)) from None
