"""From a validated request body to one call for a model worker.

Everything that needs no tokenizer is checked here, in the web process, before any
model is touched; what needs one (template, tokens, grammar, context) is the
worker's (engine/prompt.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from labsettings import lab_settings

from .adapter_registry import resolve_adapters
from .api.errors import ApiError
from .api.openai_chat import check_reasoning_effort, parse_messages, template_kwargs
from .api.openai_completions import parse_prompt
from .api.openai_params import CommonParams, check_logprobs, parse_common
from .api.openai_structured import parse_structured_output
from .api.openai_tools import parse_tools
from .engine import SamplingParams
from .engine.wire import ChatInput, GenerateCall
from .engines import model_record
from .models import LanguageModel
from .sampling_defaults import resolve, sampling_defaults


@dataclass(frozen=True)
class PlannedGeneration:
    """A call ready for its model's worker."""

    model: LanguageModel
    params: CommonParams
    call: GenerateCall

    @property
    def model_name(self) -> str:
        return self.model.name


def chat_input(body: dict, messages: list[dict] | None = None) -> ChatInput:
    messages = parse_messages(body) if messages is None else messages
    plan = parse_tools(body)
    structured = parse_structured_output(body)
    return ChatInput(
        messages=messages,
        template_kwargs=template_kwargs(body),
        tools=plan.tools,
        tool_names=sorted(plan.names),
        tool_choice=plan.choice,
        structured=structured,
    )


def _check_max_tokens(params: CommonParams) -> None:
    # A server-wide cap (MLXLAB_MAX_TOKENS_LIMIT), published as the schema's maximum.
    limit = lab_settings.max_tokens_limit
    if limit and params.max_tokens is not None and params.max_tokens > limit:
        raise ApiError(f"max_tokens must be at most {limit} on this server", param="max_tokens")


def cache_scope(caller: str) -> str:
    """The prompt-cache scope of `caller` (MLXLAB_PROMPT_CACHE_SCOPE: user, or global)."""
    return "" if lab_settings.prompt_cache_scope == "global" else caller


async def plan_generation(
    body: dict, *, text: bool = False, count_only: bool = False, caller: str = ""
):
    """Validate a chat (or, with `text`, a raw completion) body into a PlannedGeneration.

    `caller` names who asks (api/access.py caller_id), so that the prompt cache
    reuses only that caller's own prompts.
    """
    # mlx-bun's order, so a body with several faults gets the same 400 from both:
    # the messages, then logprobs, then reasoning_effort, then everything else.
    messages = None if text else parse_messages(body)
    check_logprobs(body)
    check_reasoning_effort(body)
    params = parse_common(body)
    chat, prompt = (None, parse_prompt(body)) if text else (chat_input(body, messages), None)
    _check_max_tokens(params)
    record = await model_record(params.model)
    adapters = await resolve_adapters(body.get("adapter"), record.name)
    defaults = sampling_defaults(record.path)
    thinking = chat.template_kwargs.get("enable_thinking") if chat is not None else None
    sampling = resolve(defaults, params.sampling, thinking=thinking)
    default = defaults.completion_max_tokens if text else defaults.chat_max_tokens
    limit = lab_settings.max_tokens_limit
    call = GenerateCall(
        chat=chat,
        text=prompt,
        sampling=SamplingParams(**sampling),
        max_tokens=params.max_tokens,
        default_max_tokens=min(default, limit) if limit else default,
        stop=params.stop,
        logprobs=params.logprobs,
        top_logprobs=params.top_logprobs,
        adapters=adapters,
        count_only=count_only,
        cache_scope=cache_scope(caller),
    )
    return PlannedGeneration(record, params, call)
