"""Server-sent events: OpenAI's `data: {json}` frames, and the typed events of Anthropic and
OpenAI's Responses.

Compact JSON from msgspec, as the official APIs send it: a frame is built for every token
of every stream, and msgspec encodes it several times faster than the json module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from django.http import StreamingHttpResponse

_json = msgspec.json.Encoder()


def data_frame(chunk: dict) -> bytes:
    """An OpenAI frame: `data: {json}`."""
    return b"data: " + _json.encode(chunk) + b"\n\n"


def typed_event_frame(event: dict) -> bytes:
    """An event named by its `type`, as Anthropic and OpenAI Responses send them."""
    return b"event: " + event["type"].encode() + b"\ndata: " + _json.encode(event) + b"\n\n"


def event_stream_response(frames: AsyncIterator[bytes]) -> StreamingHttpResponse:
    """A streaming response Django cancels when the client disconnects.

    Django's ASGI handler listens for http.disconnect while it streams and
    closes this iterator, which cancels the engine sequence behind it.
    """
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
