"""The engine's one internal request and the events it streams back.

Every protocol adapter (OpenAI chat, OpenAI completions, Responses, Anthropic)
parses its wire format into a GenerationRequest and renders these events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .drafting import DraftPlan

# mlx_lm.server caps top_logprobs at 11 (it mirrors the OpenAI API's old limit).
MAX_TOP_LOGPROBS = 11


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is picked; names and defaults follow mlx_lm.server."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    seed: int | None = None
    logit_bias: dict[int, float] | None = None
    repetition_penalty: float = 0.0
    repetition_context_size: int = 20
    presence_penalty: float = 0.0
    presence_context_size: int = 20
    frequency_penalty: float = 0.0
    frequency_context_size: int = 20

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0, "temperature must be at least 0"),
            (0 <= self.top_p <= 1, "top_p must be between 0 and 1"),
            (self.top_k >= 0, "top_k must be at least 0"),
            (0 <= self.min_p <= 1, "min_p must be between 0 and 1"),
            (0 <= self.xtc_probability <= 1, "xtc_probability must be between 0 and 1"),
            (0 <= self.xtc_threshold <= 1, "xtc_threshold must be between 0 and 1"),
            (self.repetition_penalty >= 0, "repetition_penalty must be at least 0"),
            (self.repetition_context_size >= 0, "repetition_context_size must be at least 0"),
            (self.presence_context_size >= 0, "presence_context_size must be at least 0"),
            (self.frequency_context_size >= 0, "frequency_context_size must be at least 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


# mlx-lm's QuantizedKVCache packs 4 or 8 bits; its quantize takes these group sizes.
KV_BITS = (4, 8)
KV_GROUP_SIZES = (32, 64, 128)
DEFAULT_QUANTIZED_KV_START = 5000  # mlx-lm's generate default


@dataclass(frozen=True)
class KVScheme:
    """A quantized KV cache: `bits` per element in groups of `group_size`, once the
    sequence holds `start` tokens (unquantized until then), as mlx-lm's kv_bits,
    kv_group_size and quantized_kv_start mean."""

    bits: int
    group_size: int = 64
    start: int = DEFAULT_QUANTIZED_KV_START

    def __post_init__(self) -> None:
        if self.bits not in KV_BITS:
            raise ValueError("kv_bits must be 4 or 8")
        if self.group_size not in KV_GROUP_SIZES:
            raise ValueError("kv_group_size must be 32, 64 or 128")
        if self.start < 0:
            raise ValueError("quantized_kv_start must be at least 0")

    @property
    def lane(self) -> tuple[int, int]:
        """The batch its quantized rows share: schemes differing only in start share one."""
        return self.bits, self.group_size

    @property
    def label(self) -> str:
        return f"{self.bits}-bit/{self.group_size}"


@dataclass(frozen=True)
class Resume:
    """A resumable generation (checkpoints.py): its checkpoint key, the tokens an earlier
    attempt generated (replayed, then continued) and the seed its sampling runs on."""

    key: str
    tokens: tuple[int, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """One sequence to generate: already tokenized, already validated."""

    prompt_tokens: list[int]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    grammar: object | None = None  # a compiled xgrammar grammar
    output: object | None = None  # an output_parser.OutputFormat
    adapters: tuple = ()  # adapters.AdapterRef, applied in this order
    cache_scope: str = ""  # whose prompt-cache entries it may reuse (prompt_cache.py)
    cache_session: str | None = None  # the prompt-cache session it continues (prompt_cache.py)
    kv: KVScheme | None = None  # None: a plain KV cache (the model's dtype)
    resume: Resume | None = None  # checkpointed, and resumed from an earlier attempt's
    draft: DraftPlan | None = None  # speculative decoding (drafting.py); None: none

    def __post_init__(self) -> None:
        if not self.prompt_tokens:
            raise ValueError("the prompt is empty")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be at most {MAX_TOP_LOGPROBS}")
        if any(not s for s in self.stop):
            raise ValueError("stop sequences must be nonempty strings")


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
class Finished:
    """The sequence ended; always the last event of a successful generation."""

    finish_reason: str  # "stop" | "length" | "tool_calls"
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


@dataclass(frozen=True)
class Failed:
    """The sequence could not be completed; the last event of a failed generation."""

    message: str


Event = TextDelta | ReasoningDelta | ToolCall | Finished | Failed
