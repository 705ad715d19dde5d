"""The one serve path of every generation endpoint: send, wait for the verdict, render.

A request that no worker can take, or whose worker dies before the answer
starts, gets the protocol's 502; one whose worker dies mid-stream ends with the
protocol's error frame. The exceptions: a request the worker had not yet accepted
when something outside killed it (SIGKILL, SIGTERM) goes once more to the restarted
worker (or another replica), as does one whose remote replica's link was lost while
another replica serves. Nothing of it had started, and it cannot have caused the
kill, whereas a crash (a segfault, an abort) may be the request's own doing and is never
repeated. And an answer whose replica was killed so while another of its model's replicas
serves goes once more to that one, whose attempt resumes from the killed generation's
checkpoint (on the replicas' shared disk): an answer not streamed had shown nothing; a
stream goes on past what it had sent (stream_resume.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from django.http import HttpResponse, JsonResponse

from .api.sse import event_stream_response
from .api.surfaces import Surface
from .chat.plan import PlannedGeneration
from .engines import open_generation, replicas_serving
from .errors import ApiError
from .protocol import wire
from .protocol.events import Failed, Finished
from .stream_resume import Diverged, Sent, beyond
from .workers.streams import Choices, EngineUnavailable, Rejected, RequestStream, WorkerStopped

log = logging.getLogger(__name__)

# A renderer has one shape on every surface: start(), feed(event), result(), failure.
# Says that the answer resumed an interrupted generation, and from which completion token.
RESUMED_HEADER = "X-Resumed-From"

RendererFactory = Callable[[wire.Accepted], object]
OnResult = Callable[[object], Awaitable[None]] | None


def rejection(error: Rejected) -> ApiError:
    rejected = error.rejected
    return ApiError(rejected.message, param=rejected.param, code=rejected.code)


async def start(plan: PlannedGeneration) -> tuple[RequestStream | Choices, wire.Accepted]:
    """Send the call and wait for the worker's verdict.

    Raises ApiError (the worker refused the request), EngineUnavailable or WorkerStopped.
    With `n` above 1, the n calls go out together (the worker builds and admits them in
    one step, so they share the batch) and are read as one stream of Indexed events.
    """
    if plan.request.n == 1:
        return await _start_one(plan)
    started = await asyncio.gather(
        *(_start_one(plan) for _ in range(plan.request.n)), return_exceptions=True
    )
    streams = [item[0] for item in started if not isinstance(item, BaseException)]
    failures = [item for item in started if isinstance(item, BaseException)]
    if failures:
        for stream in streams:
            stream.close()
        raise failures[0]
    return Choices(streams), started[0][1]


async def _start_one(
    plan: PlannedGeneration, *, again: bool = True
) -> tuple[RequestStream, wire.Accepted]:
    stream = await open_generation(plan.model, plan.call)
    try:
        return stream, await stream.accepted()
    except WorkerStopped as error:
        stream.close()
        if not (again and _unstarted_retry(plan, error)):
            raise
        log.warning("%s: %s before it took a request; sending it again", plan.model_name, error)
    except Rejected as error:
        raise rejection(error) from None
    except RuntimeError as error:  # the worker failed to prepare a valid request
        raise ApiError(str(error), status=500, type="server_error") from None
    except BaseException:
        stream.close()
        raise
    return await _start_one(plan, again=False)


def _unstarted_retry(plan: PlannedGeneration, error: WorkerStopped) -> bool:
    """Whether a request its worker had not accepted goes once more: its worker was killed
    from outside (to its successor, or another replica), or the link to its remote
    replica was lost while another replica serves. A lost link hides whether the request
    crashed that worker; a partition or a host's restart is far likelier, and going once
    more risks one more worker at most, against a 502 for every request in flight."""
    if error.killed_from_outside:
        return True
    return error.remote and replicas_serving(plan.model_name) > 0


async def serve(
    plan: PlannedGeneration,
    surface: Surface,
    make_renderer: RendererFactory,
    *,
    stream: bool,
    on_result: OnResult = None,
    again: bool = True,
) -> HttpResponse:
    try:
        events, accepted = await start(plan)
    except ApiError as error:
        return surface.error(error)
    except (EngineUnavailable, WorkerStopped) as error:
        log.warning("%s: %s", plan.model_name, error.message)
        return surface.unavailable(error.message, error.state)
    except asyncio.CancelledError:
        log.info("499 client closed the request before its answer started")
        raise
    renderer = make_renderer(accepted)
    if stream:
        response = event_stream_response(_frames(plan, events, renderer, surface, on_result))
    else:
        try:
            response = await _collect(plan, events, renderer, surface, on_result, again=again)
        except WorkerStopped:  # killed from outside, and another replica serves
            log.warning("%s: a killed replica held the request; on another", plan.model_name)
            again_on = {"stream": False, "on_result": on_result, "again": False}
            return await serve(plan, surface, make_renderer, **again_on)
    if accepted.warning:
        response["Warning"] = f'299 mlxlab "{accepted.warning}"'
    if accepted.resumed_from:  # an earlier attempt's checkpoint: replayed, then continued
        response[RESUMED_HEADER] = str(accepted.resumed_from)
    return response


async def _collect(plan, events: RequestStream, renderer, surface: Surface, on_result, *, again):
    try:
        async for event in events.events():
            renderer.feed(event)
    except WorkerStopped as error:
        if again and error.killed_from_outside and replicas_serving(plan.model_name):
            raise
        log.error("%s: worker stopped under a request (%s)", plan.model_name, error)
        return surface.unavailable(error.message, error.state)
    except asyncio.CancelledError:
        log.info("499 client closed the request; its generation is cancelled")
        raise
    if renderer.failure is not None:
        log.error("generation failed: %s", renderer.failure)
        return surface.error(ApiError(renderer.failure, status=500, type="server_error"))
    if on_result is not None:
        await on_result(renderer)
    return JsonResponse(renderer.result())


async def _frames(
    plan: PlannedGeneration,
    events: RequestStream | Choices,
    renderer,
    surface: Surface,
    on_result: OnResult,
) -> AsyncIterator[bytes]:
    """The event stream; closing it early (the client left) cancels the generation.

    The frames of every event already queued go out as one body chunk: a reader that
    fell behind its worker (many streams, fast steps) catches up in one ASGI message
    and one socket write, not one per token.
    """
    finished, sent, stopped, held = False, Sent(), None, []
    try:
        for item in renderer.start():  # at once: before a long prefill's first token
            yield surface.frame(item)
        source = events.events()
        while True:
            try:
                async with contextlib.aclosing(source) as stream:
                    async for event in stream:
                        sent.record(event)
                        held.extend(surface.frame(item) for item in renderer.feed(event))
                        last = isinstance(event, Finished | Failed)  # with the end frame
                        if held and not (last or events.pending):
                            yield b"".join(held)
                            held.clear()
                break
            except WorkerStopped as error:
                resumed = await _resumed(plan, events, error) if stopped is None else None
                stopped = error
                if resumed is None:
                    log.error("worker stopped while streaming (%s)", error)
                    yield b"".join([*held, surface.stream_error(error.stream_message)])
                    finished = True
                    return
                events, source = resumed, beyond(resumed.events(), sent)
            except Diverged as error:
                log.error("a resumed stream could not go on: %s", error)
                yield b"".join([*held, surface.stream_error(stopped.stream_message)])
                finished = True
                return
        finished = True
        if renderer.failure is None and surface.end:
            held.append(surface.end)
        if held:
            yield b"".join(held)
        if on_result is not None:
            await on_result(renderer)
    finally:
        if not finished:
            log.info("499 client closed the stream; its generation is cancelled")


async def _resumed(plan, events, error: WorkerStopped) -> RequestStream | None:
    """The stream sent again, to another replica, where a killed one held it: nothing of
    its own doing stopped it, and the new attempt resumes from its checkpoint. Not with
    logprobs: a replayed token's are not kept. None: the failure contract's frame."""
    if not (
        isinstance(events, RequestStream)
        and error.killed_from_outside
        and replicas_serving(plan.model_name)
        and not plan.call.logprobs
    ):
        return None
    log.warning("%s: a killed replica held a stream; resuming it on another", plan.model_name)
    try:
        stream, _ = await _start_one(plan, again=False)
    except (ApiError, EngineUnavailable, WorkerStopped) as failure:
        log.error("%s: the stream could not resume: %s", plan.model_name, failure)
        return None
    return stream
