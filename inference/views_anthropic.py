"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens.

The body is parsed into the ChatCall every surface shares and served by the chat
path; only the rendering (message object, named events, error shape) is Anthropic's.
"""

from __future__ import annotations

import asyncio
import logging

from django.http import HttpRequest, HttpResponse, JsonResponse

from .api.access import caller_id
from .api.anthropic_render import MessageBuilder, error_response
from .api.anthropic_request import parse_messages_request
from .api.endpoints import api_endpoint
from .api.openai_request import parse_json_body
from .api.surfaces import ANTHROPIC
from .chat.plan import plan_generation
from .errors import ApiError
from .serve import serve, start
from .workers.streams import EngineUnavailable, WorkerStopped

log = logging.getLogger(__name__)


def _parsed(body: bytes, *, count_only: bool = False):
    # Run off the event loop: a body's JSON and its images' base64 and headers are CPU work.
    return parse_messages_request(parse_json_body(body), count_only=count_only)


@api_endpoint("POST", render_error=error_response)
async def messages(request: HttpRequest) -> HttpResponse:
    try:
        call = await asyncio.to_thread(_parsed, request.body)
        plan = await plan_generation(call, caller=await caller_id(request))
    except ApiError as error:
        return error_response(error)
    return await serve(
        plan,
        ANTHROPIC,
        lambda accepted: MessageBuilder(model=plan.model_name, input_tokens=accepted.prompt_tokens),
        stream=plan.request.stream,
    )


@api_endpoint("POST", render_error=error_response)
async def count_tokens(request: HttpRequest) -> HttpResponse:
    try:
        call = await asyncio.to_thread(_parsed, request.body, count_only=True)
        _, accepted = await start(await plan_generation(call, count_only=True))
    except ApiError as error:
        return error_response(error)
    except (EngineUnavailable, WorkerStopped) as error:
        return ANTHROPIC.unavailable(error.message, error.state)
    return JsonResponse({"input_tokens": accepted.prompt_tokens})
