"""From validated OpenAI fields and prompt tokens to one GenerationRequest."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from .adapter_registry import resolve_adapters
from .api.errors import ApiError
from .api.openai_params import CommonParams, parse_common
from .engine import Engine, GenerationRequest
from .engines import get_engine


def _check_top_k(top_k: int, vocab_size: int) -> None:
    # mlx-lm's top-k sampler raises mid-generation (a 500) unless 0 < top_k < vocabulary.
    if top_k >= vocab_size:
        raise ApiError(f"top_k must be less than the vocabulary size ({vocab_size})", param="top_k")


def _check_logit_bias(bias: dict[int, float] | None, vocab_size: int) -> None:
    # MLX does not bounds-check scatter indices: an unknown id would crash the process.
    for token in bias or {}:
        if not 0 <= token < vocab_size:
            raise ApiError(
                f"logit_bias token id {token} is out of range for a vocabulary of {vocab_size}",
                param="logit_bias",
            )


def generation_request(
    params: CommonParams,
    prompt: list[int],
    *,
    context_length: int,
    vocab_size: int,
    grammar=None,
    output=None,
    adapters: tuple = (),
) -> GenerationRequest:
    """Fit the request into the context window, or say plainly why it cannot."""
    _check_logit_bias(params.sampling.logit_bias, vocab_size)
    _check_top_k(params.sampling.top_k, vocab_size)
    # A server-wide cap (MLXLAB_MAX_TOKENS_LIMIT), published as the schema's maximum.
    limit = settings.MLXLAB.get("MAX_TOKENS_LIMIT") or 0
    if limit and params.max_tokens is not None and params.max_tokens > limit:
        raise ApiError(f"max_tokens must be at most {limit} on this server", param="max_tokens")
    room = context_length - len(prompt)
    if room < 1:
        raise ApiError(
            f"The prompt is {len(prompt)} tokens long, which leaves no room to generate "
            f"in this model's context length of {context_length} tokens.",
            param="messages",
            code="context_length_exceeded",
        )
    if params.max_tokens is not None and params.max_tokens > room:
        raise ApiError(
            f"This model's context length is {context_length} tokens, but the request asks for "
            f"{len(prompt) + params.max_tokens} ({len(prompt)} in the prompt and "
            f"{params.max_tokens} to generate). Shorten the prompt or lower max_tokens.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    max_tokens = params.max_tokens or min(
        settings.MLXLAB["DEFAULT_MAX_TOKENS"], room, limit or room
    )
    return GenerationRequest(
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        sampling=params.sampling,
        stop=params.stop,
        logprobs=params.logprobs,
        top_logprobs=params.top_logprobs,
        grammar=grammar,
        output=output,
        adapters=adapters,
    )


@dataclass(frozen=True)
class PlannedGeneration:
    model_name: str
    engine: Engine
    params: CommonParams
    request: GenerationRequest
    warning: str | None


async def plan_generation(body: dict, prepare_prompt) -> PlannedGeneration:
    """Validate a chat-style body, find its engine, build its prompt and request.

    `prepare_prompt(body, engine)` returns the prompt, grammar and output
    format (a chat conversation, or raw text for completions).
    """
    params = parse_common(body)
    name, engine = await get_engine(params.model)
    adapters = await resolve_adapters(body.get("adapter"), name)
    prepared = await prepare_prompt(body, engine)
    request = generation_request(
        params,
        prepared.prompt,
        context_length=engine.context_length,
        vocab_size=engine.vocab_size,
        grammar=prepared.grammar,
        output=prepared.output,
        adapters=adapters,
    )
    return PlannedGeneration(name, engine, params, request, prepared.warning)
