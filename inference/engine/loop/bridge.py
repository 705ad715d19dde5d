"""From the engine thread to asyncio: one request as an async iterator of events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ...protocol.events import Event, Failed, Finished
from ..prompting.request import GenerationRequest
from .engine import Engine


async def stream_events(engine: Engine, request: GenerationRequest) -> AsyncIterator[Event]:
    """Submit `request` and yield its events until it finishes or fails.

    Closing the iterator early (the client went away, the task was cancelled)
    cancels the sequence at the engine's next step and frees its slot.
    """
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()

    def emit(event: Event) -> None:
        # A closed loop means nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(events.put_nowait, event)

    request_id = engine.submit(request, emit)
    ended = False
    try:
        while not ended:
            event = await events.get()
            ended = isinstance(event, Finished | Failed)
            yield event
    finally:
        if not ended:
            engine.cancel(request_id)
