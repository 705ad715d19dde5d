"""OpenAI /v1/responses: create (streaming or not), retrieve, delete, input items."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse

from .api.endpoints import api_endpoint
from .api.errors import ApiError
from .api.openai_params import parse_json_body
from .api.responses_render import ResponseBuilder
from .api.responses_request import ResponsesCall, chat_body, items_to_messages, parse_responses_call
from .api.sse import event_stream_response, typed_event_frame
from .chat_request import prepare_chat
from .engine import stream_events
from .generation import plan_generation
from .response_store import response_chain, response_delete, response_get, response_store

log = logging.getLogger(__name__)


def _not_found(response_id: str, param: str | None = None) -> ApiError:
    return ApiError(
        f"Response with id '{response_id}' not found.", status=404, param=param, code="not_found"
    )


async def _history(call: ResponsesCall) -> list[dict]:
    if call.previous_id is None:
        return []
    chain = await sync_to_async(response_chain)(response_id=call.previous_id)
    if chain is None:
        raise ApiError(
            f"Previous response with id '{call.previous_id}' not found.",
            status=404,
            param="previous_response_id",
            code="previous_response_not_found",
        )
    # Earlier instructions are not carried over, as in OpenAI's API.
    return items_to_messages([item for r in chain for item in r.input_items + r.output_items])


async def _store(call: ResponsesCall, builder: ResponseBuilder) -> None:
    if call.store and builder.status in ("completed", "incomplete"):
        await sync_to_async(response_store)(
            body=builder.response(),
            input_items=call.input_items,
            instructions=call.instructions,
            previous_id=call.previous_id,
        )


async def _stream(call: ResponsesCall, builder: ResponseBuilder, events) -> AsyncIterator[bytes]:
    for event in builder.start():
        yield typed_event_frame(event)
    async for engine_event in events:
        for event in builder.feed(engine_event):
            yield typed_event_frame(event)
    await _store(call, builder)


@api_endpoint("POST")
async def responses_create(request: HttpRequest) -> HttpResponse:
    try:
        body = parse_json_body(request.body)
        call = parse_responses_call(body)
        plan = await plan_generation(chat_body(call, await _history(call)), prepare_chat)
    except ApiError as error:
        return error.response()
    builder = ResponseBuilder(model=plan.model_name, request=body)
    events = stream_events(plan.engine, plan.request)
    if plan.params.stream:
        response = event_stream_response(_stream(call, builder, events))
    else:
        async for event in events:
            builder.feed(event)
        if builder.status == "failed":
            return ApiError(builder.error["message"], status=500, type="server_error").response()
        await _store(call, builder)
        response = JsonResponse(builder.response())
    if plan.warning:
        response["Warning"] = f'299 mlxlab "{plan.warning}"'
    return response


async def _stored_or_404(response_id: str):
    stored = await sync_to_async(response_get)(response_id=response_id)
    if stored is None:
        raise _not_found(response_id)
    return stored


@api_endpoint("GET", "DELETE")
async def responses_detail(request: HttpRequest, response_id: str) -> HttpResponse:
    """GET retrieves, DELETE removes; one URL, two methods."""
    if request.method == "DELETE":
        if not await sync_to_async(response_delete)(response_id=response_id):
            return _not_found(response_id).response()
        return JsonResponse({"id": response_id, "object": "response", "deleted": True})
    try:
        stored = await _stored_or_404(response_id)
    except ApiError as error:
        return error.response()
    return JsonResponse(stored.body)


@api_endpoint("GET")
async def responses_input_items(request: HttpRequest, response_id: str) -> HttpResponse:
    try:
        stored = await _stored_or_404(response_id)
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
