"""One chat call: what every surface's parser makes of its body, in one typed value.

OpenAI chat and text completions, the Responses API, Anthropic Messages and the lab's
chat page each parse their own wire format into a ChatCall once; nothing after the
parse reads the body again. `plan.plan_generation` turns it into a model worker's call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.grammar import GrammarSpec
from .tools import NO_TOOLS, ToolPlan


@dataclass(frozen=True)
class ChatCall:
    """A validated request: a chat turn (`messages`) or a raw text prompt (`prompt`)."""

    model: str | None
    messages: list[dict] | None = None  # normalised for the chat template
    prompt: str | None = None
    tools: ToolPlan = NO_TOOLS
    structured: GrammarSpec | None = None
    template_kwargs: dict = field(default_factory=dict)
    reasoning_effort: str | None = None  # for templates with a depth variable of their own
    sampling: dict = field(default_factory=dict)  # the fields the request set, checked
    max_tokens: int | None = None  # None: the model's default (sampling_defaults)
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    adapter: str | None = None  # as sent; plan_generation resolves it
    cache_session: str | None = None  # session_id / prompt_cache_key
    kv: dict = field(default_factory=dict)  # the KV-cache fields the request set, checked
    draft: dict = field(default_factory=dict)  # draft_model, num_draft_tokens, prediction

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("a ChatCall has messages or a prompt, not both")

    @property
    def is_chat(self) -> bool:
        return self.messages is not None
