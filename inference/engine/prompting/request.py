"""The engine's one internal request; the events it streams back are the protocol's
(inference/protocol/events.py).

The worker turns each wire call into a GenerationRequest: tokenized, validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...protocol.sampling import MAX_TOP_LOGPROBS, KVScheme, SamplingParams
from ..drafts.drafting import DraftPlan
from ..drafts.fill import FillPlan
from ..media.prompt import MediaPrompt


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
    # Prompt tokens a next turn shares (cache_boundary.py): its KV state is stored there.
    cache_boundary: int | None = None
    kv: KVScheme | None = None  # None: a plain KV cache (the model's dtype)
    resume: Resume | None = None  # checkpointed, and resumed from an earlier attempt's
    draft: DraftPlan | None = None  # speculative decoding (drafting.py); None: none
    media: MediaPrompt | None = None  # its images as model inputs; None: text only
    fill: FillPlan | None = None  # tool-call fast-forwarding (drafts/fill.py); None: off

    @property
    def prefill_tokens(self) -> list[int]:
        """What the batch prefills: the prompt, and a resumed generation's earlier tokens."""
        if self.resume is None or not self.resume.tokens:
            return self.prompt_tokens
        return [*self.prompt_tokens, *self.resume.tokens]

    @property
    def prefill_key(self) -> list[int]:
        """`prefill_tokens` as the prompt cache keys them: each image's placeholders by its
        hash (media/prompt.py)."""
        if self.media is None:
            return self.prefill_tokens
        return [*self.media.key_tokens, *(self.resume.tokens if self.resume else ())]

    def __post_init__(self) -> None:
        if not self.prompt_tokens:
            raise ValueError("the prompt is empty")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be at most {MAX_TOP_LOGPROBS}")
        if any(not s for s in self.stop):
            raise ValueError("stop sequences must be nonempty strings")
        if self.media is not None and len(self.media.key_tokens) != len(self.prompt_tokens):
            raise ValueError("a media prompt's cache key must spell every prompt token")
