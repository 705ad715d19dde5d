"""OpenAI /v1/responses: create (streaming or not), retrieve, delete, input items."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse

from .api.access import caller_id
from .api.endpoints import api_endpoint
from .api.responses_render import ResponseBuilder
from .api.responses_request import (
    ResponsesCall,
    items_to_messages,
    parse_responses_body,
    parse_responses_call,
    responses_chat_call,
)
from .api.surfaces import RESPONSES
from .chat.plan import plan_generation
from .errors import ApiError
from .response_store import (
    BrokenChain,
    response_chain,
    response_delete,
    response_get,
    response_store,
)
from .serve import serve

log = logging.getLogger(__name__)


def _not_found(response_id: str, param: str | None = None) -> ApiError:
    return ApiError(
        f"Response with id '{response_id}' not found.", status=404, param=param, code="not_found"
    )


async def _history(call: ResponsesCall, owner: str) -> list[dict]:
    if call.previous_id is None:
        return []
    try:
        chain = await sync_to_async(response_chain)(response_id=call.previous_id, owner=owner)
    except BrokenChain as broken:
        raise ApiError(
            f"Previous response '{call.previous_id}' continues '{broken.missing_id}', "
            "which was deleted or has expired: the conversation cannot be continued "
            "without its earlier turns.",
            status=400,
            param="previous_response_id",
            code="previous_response_chain_broken",
        ) from None
    if chain is None:
        raise ApiError(
            f"Previous response with id '{call.previous_id}' not found.",
            status=404,
            param="previous_response_id",
            code="previous_response_not_found",
        )
    # Earlier instructions are not carried over, as in OpenAI's API.
    return items_to_messages([item for r in chain for item in r.input_items + r.output_items])


async def _store(call: ResponsesCall, builder: ResponseBuilder, owner: str) -> None:
    if call.store and builder.status in ("completed", "incomplete"):
        await sync_to_async(response_store)(
            body=builder.response(),
            input_items=call.input_items,
            instructions=call.instructions,
            previous_id=call.previous_id,
            owner=owner,
        )


@api_endpoint("POST")
async def responses_create(request: HttpRequest) -> HttpResponse:
    try:
        # Parsing runs off the event loop: JSON, base64 and image headers are CPU work.
        call = await asyncio.to_thread(
            lambda: parse_responses_call(parse_responses_body(request.body))
        )
        owner = await caller_id(request)
        history = await _history(call, owner)
        chat = await asyncio.to_thread(responses_chat_call, call, history)
        plan = await plan_generation(chat, caller=owner)
    except ApiError as error:
        return error.response()

    async def store(builder: ResponseBuilder) -> None:
        await _store(call, builder, owner)

    return await serve(
        plan,
        RESPONSES,
        lambda accepted: ResponseBuilder(
            model=plan.model_name, request=_effective(call.body, plan)
        ),
        stream=plan.request.stream,
        on_result=store,
    )


def _effective(body: dict, plan) -> dict:
    """The body with the sampling it ran with, as OpenAI echoes it: the model's own
    defaults where the request set none."""
    sampling = plan.call.sampling
    return {**body, "temperature": sampling.temperature, "top_p": sampling.top_p}


async def _stored_or_404(request: HttpRequest, response_id: str):
    owner = await caller_id(request)
    stored = await sync_to_async(response_get)(response_id=response_id, owner=owner)
    if stored is None:
        raise _not_found(response_id)
    return stored


@api_endpoint("GET", "DELETE")
async def responses_detail(request: HttpRequest, response_id: str) -> HttpResponse:
    """GET retrieves, DELETE removes; one URL, two methods."""
    if request.method == "DELETE":
        owner = await caller_id(request)
        if not await sync_to_async(response_delete)(response_id=response_id, owner=owner):
            return _not_found(response_id).response()
        return JsonResponse({"id": response_id, "object": "response", "deleted": True})
    try:
        stored = await _stored_or_404(request, response_id)
    except ApiError as error:
        return error.response()
    return JsonResponse(stored.body)


@api_endpoint("GET")
async def responses_input_items(request: HttpRequest, response_id: str) -> HttpResponse:
    try:
        stored = await _stored_or_404(request, response_id)
    except ApiError as error:
        return error.response()
    items = stored.input_items
    return JsonResponse(
        {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None,
            "has_more": False,
        }
    )
