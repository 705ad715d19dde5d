"""The OpenAI-compatible endpoints: parse, validate, call the engine, render."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .api.endpoints import api_endpoint
from .api.errors import ApiError, model_not_found
from .api.openai_completions import completion_logprobs, completion_prompt_tokens, parse_prompt
from .api.openai_params import parse_json_body
from .api.openai_render import ChatRenderer, CompletionRenderer, GenerationFailed, collect
from .api.sse import event_stream_response, openai_frames
from .chat_request import PreparedChat, prepare_chat
from .engine import stream_events
from .engine.output_parser import OutputFormat
from .generation import plan_generation
from .models import LanguageModel

log = logging.getLogger(__name__)


async def _serve(
    request: HttpRequest, *, prepare_prompt, renderer_class, adapt_body=None
) -> HttpResponse:
    """The one path of every OpenAI generation endpoint."""
    try:
        body = parse_json_body(request.body)
        body = adapt_body(body) if adapt_body else body
        plan = await plan_generation(body, prepare_prompt)
    except ApiError as error:
        return error.response()
    params = plan.params
    renderer = renderer_class(
        plan.model_name, logprobs=params.logprobs, include_usage=params.include_usage
    )
    events = stream_events(plan.engine, plan.request)
    if params.stream:
        response = event_stream_response(openai_frames(renderer.chunks(events)))
    else:
        try:
            result = await collect(events)
        except GenerationFailed as failure:
            log.error("generation failed: %s", failure)
            return ApiError(str(failure), status=500, type="server_error").response()
        response = JsonResponse(renderer.complete(result))
    if plan.warning:
        response["Warning"] = f'299 mlxlab "{plan.warning}"'
    return response


async def _text_prompt(body: dict, engine) -> PreparedChat:
    prompt = completion_prompt_tokens(engine.tokenizer, parse_prompt(body))
    # Raw text continues the prompt: no reasoning split, no tool calls.
    return PreparedChat(prompt=prompt, grammar=None, output=OutputFormat(think=None))


def _legacy_logprobs(body: dict) -> dict:
    enabled, top = completion_logprobs(body)
    return {
        **body,
        "logprobs": enabled,
        "top_logprobs": top if top is not None else body.get("top_logprobs"),
    }


@api_endpoint("POST")
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _serve(request, prepare_prompt=prepare_chat, renderer_class=ChatRenderer)


@api_endpoint("POST")
async def completions(request: HttpRequest) -> HttpResponse:
    return await _serve(
        request,
        prepare_prompt=_text_prompt,
        renderer_class=CompletionRenderer,
        adapt_body=_legacy_logprobs,
    )


def _model_object(record: LanguageModel) -> dict:
    return {
        "id": record.name,
        "object": "model",
        "created": int(record.created_at.timestamp()),
        "owned_by": "mlxlab",
        "context_length": record.context_length,
    }


@api_endpoint("GET")
async def models(request: HttpRequest) -> JsonResponse:
    data = [_model_object(record) async for record in LanguageModel.objects.all()]
    return JsonResponse({"object": "list", "data": data})


@api_endpoint("GET")
async def model_detail(request: HttpRequest, name: str) -> JsonResponse:
    record = await LanguageModel.objects.filter(name=name).afirst()
    if record is None:
        return model_not_found(name).response()
    return JsonResponse(_model_object(record))


@csrf_exempt
async def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return ApiError(f"Unknown endpoint {request.path}", status=404, code="not_found").response()
