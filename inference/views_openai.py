"""The OpenAI-compatible endpoints: parse, validate, call the engine, render."""

from __future__ import annotations

import asyncio
import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .accounting import account_for_input
from .api.access import caller_id
from .api.embeddings_render import embeddings_body
from .api.embeddings_request import parse_embeddings
from .api.endpoints import api_endpoint
from .api.openai_render import ChatRenderer, CompletionRenderer
from .api.openai_request import parse_chat_completion, parse_completion, parse_json_body
from .api.rerank_render import rerank_body
from .api.rerank_request import parse_rerank
from .api.surfaces import OPENAI
from .chat.plan import plan_generation
from .embeddings import embed
from .engines import supervisor
from .errors import ApiError, model_not_found
from .model_registry import amodel_named, model_capabilities
from .models import LanguageModel
from .protocol.embeddings import Embedded
from .rerank import rerank as rerank_documents
from .sampling_defaults import sampling_defaults
from .serve import serve
from .workers.streams import EngineUnavailable, WorkerStopped

log = logging.getLogger(__name__)


async def _serve(request: HttpRequest, *, renderer_class, parse) -> HttpResponse:
    """The one path of every OpenAI generation endpoint."""
    try:
        # Off the event loop: a body's JSON and its images' base64 and headers are CPU work.
        call = await asyncio.to_thread(lambda: parse(parse_json_body(request.body)))
        plan = await plan_generation(call, caller=await caller_id(request))
    except ApiError as error:
        return error.response()
    params = plan.request
    return await serve(
        plan,
        OPENAI,
        lambda accepted: renderer_class(
            plan.model_name,
            logprobs=params.logprobs,
            include_usage=params.include_usage,
            n=params.n,
        ),
        stream=params.stream,
    )


@api_endpoint("POST")
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _serve(request, renderer_class=ChatRenderer, parse=parse_chat_completion)


@api_endpoint("POST")
async def completions(request: HttpRequest) -> HttpResponse:
    return await _serve(request, renderer_class=CompletionRenderer, parse=parse_completion)


async def _from_worker(request: HttpRequest, parse, ask):
    """(the parsed call, the worker's answer) of a one-answer call (embeddings, rerank), or
    the error response: OpenAI's shape for the client's errors and an unavailable worker.
    The input tokens go to the usage record as a generation's prompt does."""
    try:
        call = parse(parse_json_body(request.body))
        record, answer = await ask(call)
    except ApiError as error:
        return error.response()
    except (EngineUnavailable, WorkerStopped) as error:
        log.warning("%s: %s", call.model, error.message)
        return OPENAI.unavailable(error.message, error.state)
    tokens = answer.prompt_tokens if isinstance(answer, Embedded) else answer.total_tokens
    account_for_input(record.name, tokens)
    return call, (record, answer)


@api_endpoint("POST")
async def embeddings(request: HttpRequest) -> HttpResponse:
    answered = await _from_worker(request, parse_embeddings, embed)
    if isinstance(answered, HttpResponse):
        return answered
    call, (record, embedded) = answered
    # Thousands of vectors make megabytes of JSON: encoded off the event loop.
    body = await asyncio.to_thread(
        embeddings_body, embedded, model=record.name, encoding_format=call.encoding_format
    )
    return HttpResponse(body, content_type="application/json")


@api_endpoint("POST")
async def rerank(request: HttpRequest) -> HttpResponse:
    """vLLM's, Cohere's and Jina's /v1/rerank, answered in OpenAI's error shapes."""
    answered = await _from_worker(request, parse_rerank, rerank_documents)
    if isinstance(answered, HttpResponse):
        return answered
    call, (record, reranked) = answered
    return JsonResponse(rerank_body(reranked, call, model=record.name))


def _model_object(record: LanguageModel) -> dict:
    return {
        "id": record.name,
        "object": "model",
        "created": int(record.created_at.timestamp()),
        "owned_by": "mlxlab",
        "context_length": record.context_length,
        # An extension, as LM Studio and Ollama list theirs: "chat", "embeddings" or "rerank".
        "capabilities": model_capabilities(record),
    }


@api_endpoint("GET")
async def models(request: HttpRequest) -> JsonResponse:
    data = [_model_object(record) async for record in LanguageModel.objects.all()]
    return JsonResponse({"object": "list", "data": data})


@api_endpoint("GET")
async def model_detail(request: HttpRequest, name: str) -> JsonResponse:
    record = await amodel_named(name)
    if record is None:
        return model_not_found(name).response()
    # Extensions: what a request gets for each sampling field it leaves out, and why; and,
    # once a worker has loaded it, whether its rows share a batch (some models' cannot).
    defaults = sampling_defaults(record.path, record.thinking_declaration()).as_dict()
    return JsonResponse(
        {**_model_object(record), "defaults": defaults, "batching": _batching(record.name)}
    )


def _batching(name: str) -> dict | None:
    """The loaded worker's word on batching (engine/process/worker.py), None until loaded."""
    for worker in supervisor().resident():
        if worker.model == name and worker.status is not None:
            return worker.status.stats.get("batching")
    return None


@csrf_exempt
async def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    return ApiError(f"Unknown endpoint {request.path}", status=404, code="not_found").response()
