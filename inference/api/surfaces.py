"""What differs between the protocols on the one serve path: framing and error shapes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpResponse, JsonResponse

from ..errors import ApiError
from .anthropic_render import error_response as anthropic_error
from .sse import data_frame, typed_event_frame


@dataclass(frozen=True)
class Surface:
    """One protocol's wire shapes: its SSE frames, its errors, its engine-unavailable answers."""

    frame: Callable[[dict], bytes]
    end: bytes  # after a stream that did not fail ("" for none)
    error: Callable[[ApiError], HttpResponse]
    unavailable: Callable[[str, str], HttpResponse]  # (message, worker state) -> the 502
    stream_error: Callable[[str], bytes]  # the frame that ends a stream whose worker died


def _openai_unavailable(message: str, state: str) -> JsonResponse:
    body = {"error": {"message": message, "type": "engine_unavailable", "state": state}}
    return JsonResponse(body, status=502)


OPENAI = Surface(
    frame=data_frame,
    end=b"data: [DONE]\n\n",
    error=ApiError.response,
    unavailable=_openai_unavailable,
    stream_error=lambda message: data_frame(
        {"error": {"message": message, "type": "engine_unavailable"}}
    ),
)

ANTHROPIC = Surface(
    frame=typed_event_frame,
    end=b"",
    error=anthropic_error,
    unavailable=lambda message, state: anthropic_error(ApiError(message, status=502)),
    stream_error=lambda message: typed_event_frame(
        {"type": "error", "error": {"type": "api_error", "message": message}}
    ),
)

RESPONSES = Surface(
    frame=typed_event_frame,
    end=b"",
    error=ApiError.response,
    unavailable=_openai_unavailable,
    stream_error=lambda message: typed_event_frame(
        {"type": "error", "code": "engine_unavailable", "message": message, "param": None}
    ),
)
