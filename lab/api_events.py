"""GET /api/events: the model workers' lifecycle as Server-Sent Events, for operators.

Each event is `id`, `event` (its kind) and `data` (JSON: model, worker, time, detail). A
reader that reconnects with `Last-Event-ID` (browsers' EventSource do) first gets what it
missed among the kept events; a comment line every KEEPALIVE_SECONDS keeps proxies from
closing an idle stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from access.error_responses import errors
from access.permissions import StaffOnly
from inference.engines import supervisor
from inference.workers.events import WorkerEvent

KEEPALIVE_SECONDS = 15.0


def frame(event: WorkerEvent) -> str:
    data = json.dumps(event.as_json(), separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"


def _after(request: Request) -> int:
    """The last id the reader saw (Last-Event-ID, or ?after=); 0 replays every kept event."""
    value = request.headers.get("Last-Event-ID") or request.query_params.get("after") or "0"
    return int(value) if value.isdigit() else 0


async def stream(after: int) -> AsyncIterator[str]:
    log = supervisor().events
    reader, missed = log.join(after)
    try:
        yield ": worker events\n\n"  # the headers and a first byte go out at once
        for event in missed:
            yield frame(event)
        while True:
            try:
                event = await asyncio.wait_for(reader.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if event is None:  # fell behind: reconnect with Last-Event-ID to replay
                yield "event: overflow\ndata: {}\n\n"
                return
            yield frame(event)
    finally:
        log.leave(reader)


class EventStreamRenderer(BaseRenderer):
    """Lets a client that accepts only `text/event-stream` (a browser's EventSource) past
    DRF's content negotiation; the events themselves bypass renderers, and an error (403)
    is written as its JSON."""

    media_type = "text/event-stream"
    format = "event-stream"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return json.dumps(data).encode()


class EventsApi(APIView):
    permission_classes = [StaffOnly]
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Replay the kept events after this id"),
            OpenApiParameter(
                "Last-Event-ID", str, OpenApiParameter.HEADER, description="As `after`"
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                description="Events: starting, ready, draining, restarting, exit, load, "
                "evict, unload, adapter_mount, adapter_unmount; each `data` is "
                "{id, kind, model, worker, time, detail}"
            ),
            **errors(403),
        },
        summary="The model workers' lifecycle events (SSE)",
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        response = StreamingHttpResponse(stream(_after(request)), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        return response
