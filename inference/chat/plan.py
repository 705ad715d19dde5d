"""From a parsed chat call to one call for a model worker.

Everything that needs no tokenizer is checked by the surfaces' parsers and here, in
the web process; what needs one (template, tokens, grammar, context) is the
worker's (engine/prompt.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from labsettings import lab_settings

from ..adapter_registry import resolve_adapters
from ..engines import model_record
from ..errors import ApiError
from ..media.remote import fetch_remote_images
from ..model_registry import amodel_named, model_capabilities, model_embedding_support
from ..models import LanguageModel
from ..protocol.embedding_folder import CHAT, RERANK
from ..protocol.media import AUDIO, IMAGE, VISION, media_parts
from ..protocol.sampling import KVScheme, SamplingParams
from ..protocol.wire import ChatInput, GenerateCall
from ..sampling_defaults import apply_thinking_default, resolve, sampling_defaults
from .call import ChatCall
from .fields import DRAFT_METHODS


@dataclass(frozen=True)
class PlannedGeneration:
    """A call ready for its model's worker, and the chat call it came from."""

    model: LanguageModel
    request: ChatCall
    call: GenerateCall

    @property
    def model_name(self) -> str:
        return self.model.name


def chat_input(request: ChatCall, template_kwargs: dict | None = None) -> ChatInput:
    """The worker's chat input; `template_kwargs`: the request's, resolved (plan_generation)."""
    return ChatInput(
        messages=request.messages,
        template_kwargs=request.template_kwargs if template_kwargs is None else template_kwargs,
        tools=request.tools.tools,
        tool_names=sorted(request.tools.names),
        tool_choice=request.tools.choice,
        structured=request.structured,
        reasoning_effort=request.reasoning_effort,
    )


def _check_max_tokens(request: ChatCall) -> None:
    # A server-wide cap (MLXLAB_MAX_TOKENS_LIMIT), published as the schema's maximum.
    limit = lab_settings.max_tokens_limit
    if limit and request.max_tokens is not None and request.max_tokens > limit:
        raise ApiError(f"max_tokens must be at most {limit} on this server", param="max_tokens")


def _check_chat_model(record: LanguageModel) -> None:
    """A generation request for a model that only embeds is a 400 naming it."""
    support = model_embedding_support(record)
    if CHAT not in support.capabilities:
        reason = support.problem or "it serves /v1/embeddings only"
        kind = "an embedding model"
        if RERANK in support.capabilities:
            kind, reason = "a reranker", "it serves /v1/rerank only"
        raise ApiError(
            f"The model '{record.name}' is {kind}: {reason}",
            param="model",
            code="model_not_supported",
        )


# What each kind of media part needs of the model, and the word its refusal uses.
MEDIA_NEEDS = {IMAGE: (VISION, "image"), AUDIO: (AUDIO, "audio")}


def _check_media(record: LanguageModel, request: ChatCall) -> None:
    """Media for a model that does not take it is a 400 naming the model."""
    kinds = {part["type"] for part in media_parts(request.messages or [])}
    if not kinds:
        return
    capabilities = model_capabilities(record)
    for kind in sorted(kinds):
        capability, word = MEDIA_NEEDS[kind]
        if capability not in capabilities:
            raise ApiError(
                f"model '{record.name}' does not accept {word} input",
                param="messages",
                code="model_not_supported",
            )


def cache_scope(caller: str) -> str:
    """The prompt-cache scope of `caller` (MLXLAB_PROMPT_CACHE_SCOPE: user, or global)."""
    return "" if lab_settings.prompt_cache_scope == "global" else caller


def kv_scheme(explicit: dict, model: str) -> KVScheme | None:
    """The request's KV cache: its own fields, then the model's MLXLAB_KV_BY_MODEL entry,
    then the server's MLXLAB_KV_* (no bits anywhere: a plain cache).

    A kv_config (`layers`) replaces all of them but the request's quantized_kv_start, which
    is 0 when unset: mlx-bun's precedence (optiq's --kv-config over --kv-bits) and start.
    """
    if "layers" in explicit:
        return KVScheme(start=explicit.get("start", 0), layers=explicit["layers"])
    resolved = {
        "bits": lab_settings.kv_bits,
        "group_size": lab_settings.kv_group_size,
        "start": lab_settings.quantized_kv_start,
        **lab_settings.kv_by_model.get(model, {}),
        **explicit,
    }
    return KVScheme(**resolved) if resolved["bits"] is not None else None


async def draft_fields(request: ChatCall, record: LanguageModel) -> dict:
    """The call's draft fields: a draft model's name resolved to its folder; the model's
    own default draft (LanguageModel.draft_model) when the request names no method and
    predicts nothing. An unknown name is a 400; a vocabulary mismatch is the worker's 400."""
    draft = dict(request.draft)
    name = draft.get("draft_model")
    if name is None and "prediction" not in draft and record.draft_model_id is not None:
        default = await LanguageModel.objects.filter(pk=record.draft_model_id).afirst()
        if default is not None:
            return {**draft, "draft_model": default.name, "draft_path": default.path}
    if name is None or name in DRAFT_METHODS:
        return draft
    found = await amodel_named(name)
    if found is None:
        raise ApiError(
            f"draft_model {name!r} is not a registered model; name one, or 'ngram' "
            "(prompt lookup) or 'none'",
            param="draft_model",
            code="model_not_found",
        )
    return {**draft, "draft_path": found.path}


async def plan_generation(
    request: ChatCall, *, count_only: bool = False, caller: str = ""
) -> PlannedGeneration:
    """The worker's call for a parsed chat call: its model, adapters and the sampling
    defaults the request left to the model.

    `caller` names who asks (api/access.py caller_id), so that the prompt cache
    reuses only that caller's own prompts.
    """
    _check_max_tokens(request)
    record = await model_record(request.model)
    _check_chat_model(record)
    _check_media(record, request)
    if request.is_chat:  # image URLs are fetched only for a model that takes them
        request = dataclasses.replace(request, messages=await fetch_remote_images(request.messages))
    adapters = await resolve_adapters(request.adapter, record.name)
    defaults = sampling_defaults(record.path, record.thinking_declaration())
    kwargs = apply_thinking_default(request.template_kwargs, defaults)
    sampling = resolve(defaults, request.sampling, thinking=kwargs.get("enable_thinking"))
    default = defaults.chat_max_tokens if request.is_chat else defaults.completion_max_tokens
    limit = lab_settings.max_tokens_limit
    call = GenerateCall(
        chat=chat_input(request, kwargs) if request.is_chat else None,
        text=request.prompt,
        sampling=SamplingParams(**sampling),
        max_tokens=request.max_tokens,
        default_max_tokens=min(default, limit) if limit else default,
        stop=request.stop,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs,
        adapters=adapters,
        count_only=count_only,
        cache_scope=cache_scope(caller),
        cache_session=request.cache_session,
        kv=kv_scheme(request.kv, record.name),
        # n choices of one prompt would share one checkpoint key: none of them resumes.
        resumable=request.n == 1,
        **await draft_fields(request, record),
    )
    return PlannedGeneration(record, request, call)
