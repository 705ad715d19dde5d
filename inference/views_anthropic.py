"""Anthropic's Messages API: /v1/messages and /v1/messages/count_tokens.

The body is translated into an OpenAI chat body and served by the chat path;
only the rendering (message object, named events, error shape) is Anthropic's.
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse

from .api.access import caller_id
from .api.anthropic_render import MessageBuilder, error_response
from .api.anthropic_request import chat_body
from .api.endpoints import api_endpoint
from .api.errors import ApiError
from .api.openai_params import parse_json_body
from .api.surfaces import ANTHROPIC
from .generation import plan_generation
from .serve import serve, start
from .workers.streams import EngineUnavailable, WorkerStopped

log = logging.getLogger(__name__)


@api_endpoint("POST", render_error=error_response)
async def messages(request: HttpRequest) -> HttpResponse:
    try:
        body = parse_json_body(request.body)
        plan = await plan_generation(chat_body(body), caller=await caller_id(request))
    except ApiError as error:
        return error_response(error)
    return await serve(
        plan,
        ANTHROPIC,
        lambda accepted: MessageBuilder(model=plan.model_name, input_tokens=accepted.prompt_tokens),
        stream=plan.params.stream,
    )


@api_endpoint("POST", render_error=error_response)
async def count_tokens(request: HttpRequest) -> HttpResponse:
    try:
        body = chat_body(parse_json_body(request.body), count_only=True)
        _, accepted = await start(await plan_generation(body, count_only=True))
    except ApiError as error:
        return error_response(error)
    except (EngineUnavailable, WorkerStopped) as error:
        return ANTHROPIC.unavailable(error.message, error.state)
    return JsonResponse({"input_tokens": accepted.prompt_tokens})
