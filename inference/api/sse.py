"""Server-sent events as OpenAI sends them: `data: {json}` frames, then `data: [DONE]`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from django.http import StreamingHttpResponse


async def openai_frames(chunks: AsyncIterator[dict]) -> AsyncIterator[bytes]:
    failed = False
    async for chunk in chunks:
        failed = failed or "error" in chunk
        yield b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
    if not failed:  # an error frame ends the stream; the SDK raises on it
        yield b"data: [DONE]\n\n"


def typed_event_frame(event: dict) -> bytes:
    """An event named by its `type`, as Anthropic and OpenAI Responses send them."""
    data = json.dumps(event, ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def event_stream_response(frames: AsyncIterator[bytes]) -> StreamingHttpResponse:
    """A streaming response Django cancels when the client disconnects.

    Django's ASGI handler listens for http.disconnect while it streams and
    closes this iterator, which cancels the engine sequence behind it.
    """
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
