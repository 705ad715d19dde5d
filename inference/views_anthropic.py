"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens.

The body is translated into an OpenAI chat body and served by the chat path;
only the rendering (message object, named events, error shape) is Anthropic's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponse, JsonResponse

from .api.anthropic_render import MessageBuilder, error_response
from .api.anthropic_request import chat_body
from .api.endpoints import api_endpoint
from .api.errors import ApiError
from .api.openai_params import parse_json_body
from .api.sse import event_stream_response, typed_event_frame
from .chat_request import prepare_chat
from .engine import Event, stream_events
from .engines import get_engine
from .generation import plan_generation

log = logging.getLogger(__name__)


async def _frames(builder: MessageBuilder, events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    for event in builder.start():
        yield typed_event_frame(event)
    async for engine_event in events:
        for event in builder.feed(engine_event):
            yield typed_event_frame(event)


@api_endpoint("POST", render_error=error_response)
async def messages(request: HttpRequest) -> HttpResponse:
    try:
        body = parse_json_body(request.body)
        plan = await plan_generation(chat_body(body), prepare_chat)
    except ApiError as error:
        return error_response(error)
    builder = MessageBuilder(model=plan.model_name, input_tokens=len(plan.request.prompt_tokens))
    events = stream_events(plan.engine, plan.request)
    if plan.params.stream:
        response = event_stream_response(_frames(builder, events))
    else:
        async for event in events:
            builder.feed(event)
        if builder.error is not None:
            log.error("generation failed: %s", builder.error)
            return error_response(ApiError(builder.error, status=500))
        response = JsonResponse(builder.message())
    if plan.warning:
        response["Warning"] = f'299 mlxlab "{plan.warning}"'
    return response


@api_endpoint("POST", render_error=error_response)
async def count_tokens(request: HttpRequest) -> HttpResponse:
    try:
        body = chat_body(parse_json_body(request.body), count_only=True)
        _, engine = await get_engine(body["model"])
        prepared = await prepare_chat(body, engine)
    except ApiError as error:
        return error_response(error)
    return JsonResponse({"input_tokens": len(prepared.prompt)})
