"""One request's answer from a worker, as the web side reads it, and its failures."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from ..protocol import wire
from ..protocol.events import Event, Failed, Finished

RETRY_SHORTLY = " — retry shortly"


@dataclass(frozen=True)
class ExitStatus:
    """How a worker process ended: an exit code, or the signal that killed it; for a
    worker on another host, the link to it that was lost (`link`: its address)."""

    code: int | None
    signal: str | None
    link: str | None = None

    def describe(self) -> str:
        if self.link:
            return f"lost the link to {self.link}"
        return f"signal {self.signal}" if self.signal else f"exit code {self.code}"

    def as_dict(self) -> dict:
        status = {"code": self.code, "signal": self.signal}
        return {**status, "link": self.link} if self.link else status


class EngineUnavailable(Exception):
    """No worker could take the request (before anything was streamed)."""

    def __init__(self, reason: str, state: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.state = state

    @property
    def message(self) -> str:
        suffix = RETRY_SHORTLY if self.state == "restarting" else ""
        return f"inference engine unavailable: {self.reason}{suffix}"


class WorkerStopped(Exception):
    """The worker died while it held the request."""

    def __init__(self, exit: ExitStatus | None, state: str) -> None:
        super().__init__(exit.describe() if exit else "worker stopped")
        self.exit = exit
        self.state = state

    @property
    def killed_from_outside(self) -> bool:
        """SIGKILL or SIGTERM: the OOM killer or an operator, never a request's own crash."""
        return self.exit is not None and self.exit.signal in ("SIGKILL", "SIGTERM")

    @property
    def remote(self) -> bool:
        return self.exit is not None and self.exit.link is not None

    @property
    def message(self) -> str:
        """For an answer that has not started: mlx-bun's wording."""
        then = "reconnecting" if self.remote else "respawning"
        return (
            "inference engine unavailable: the engine worker stopped mid-request; "
            f"{then}{RETRY_SHORTLY}"
        )

    @property
    def stream_message(self) -> str:
        """For an event stream already under way."""
        detail = f" ({self.exit.describe()})" if self.exit else ""
        then = "it is being reconnected" if self.remote else "it is being respawned"
        return (
            "inference engine unavailable: the engine worker stopped while streaming this "
            f"response{detail}; {then}"
        )


class Rejected(Exception):
    """The worker refused the request as sent (a client error)."""

    def __init__(self, rejected: wire.Rejected) -> None:
        super().__init__(rejected.message)
        self.rejected = rejected


STOPPED = "stopped"  # the kind delivered when the worker dies


class Watcher(Protocol):
    """Told of a request's events as the web side reads them, and of a client that left."""

    def event(self, event: Event) -> None: ...

    def abandoned(self) -> None: ...

    def settled(self, tally: Finished) -> None:
        """The worker's tally of an abandoned request: what it generated before it stopped."""


class Deliveries:
    """The messages of one read from a worker (a step's events for many requests), handed
    to each caller's loop in one call: a loop woken once per step, not once per token."""

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, list] = {}

    def add(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item: tuple) -> None:
        self._by_loop.setdefault(loop, []).append((queue, item))

    def send(self) -> None:
        for loop, items in self._by_loop.items():
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone
                loop.call_soon_threadsafe(_put_all, items)
        self._by_loop = {}


def _put_all(items: list[tuple[asyncio.Queue, tuple]]) -> None:
    for queue, item in items:
        queue.put_nowait(item)


class RequestStream:
    """Messages for one request, delivered from the supervisor's thread to the caller's loop.

    `accepted()` waits for the worker's verdict; iterating yields the engine's events.
    Closing it early cancels the request in the worker.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._early: list[Event] = []  # events that overtook "accepted"
        self.ended = False
        self.count_only = False  # answered by "accepted" alone
        self.cancel: Callable[[], None] = lambda: None  # set once sent to a worker
        self.worker_state: Callable[[], str] = lambda: "stopped"
        self.watchers: tuple[Watcher, ...] = ()  # see each event as it is read (metrics.py)
        self.route = None  # routing.RouteKey it was routed by, among replicas; None: one

    def deliver(self, kind: str, payload: object) -> None:
        """Called on the supervisor's loop."""
        with contextlib.suppress(RuntimeError):  # the caller's loop is gone
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, payload))

    def deliver_later(self, kind: str, payload: object, batch: Deliveries) -> None:
        """Called on the supervisor's loop: delivered when `batch` is sent."""
        batch.add(self._loop, self._queue, (kind, payload))

    @property
    def pending(self) -> bool:
        """Whether more is already here: a reader behind the worker writes it all at once."""
        return not self._queue.empty()

    async def accepted(self) -> wire.Accepted:
        while True:
            kind, payload = await self._queue.get()
            if kind == "accepted":
                return payload
            if kind == "rejected":
                self.ended = True
                raise Rejected(payload)
            if kind == STOPPED:
                self.ended = True
                raise WorkerStopped(payload, self.worker_state())
            if isinstance(payload, Failed):
                self.ended = True
                raise RuntimeError(payload.message)
            self._early.append(payload)

    async def reply(self) -> object:
        """The one message that answers a call with no stream (an embeddings call): its
        payload. Raises Rejected, WorkerStopped, or RuntimeError for a Failed event."""
        kind, payload = await self._queue.get()
        self.ended = True
        if kind == "rejected":
            raise Rejected(payload)
        if kind == STOPPED:
            raise WorkerStopped(payload, self.worker_state())
        if isinstance(payload, Failed):
            raise RuntimeError(payload.message)
        return payload

    async def events(self) -> AsyncIterator[Event]:
        """The events until Finished or Failed; a dead worker raises WorkerStopped."""
        try:
            for event in self._early:
                self._read(event)
                yield event
                if self.ended:
                    return
            while True:
                kind, payload = await self._queue.get()
                if kind == STOPPED:
                    self.ended = True
                    raise WorkerStopped(payload, self.worker_state())
                self._read(payload)
                yield payload
                if self.ended:
                    return
        finally:
            self.close()

    def _read(self, event: Event) -> None:
        self.ended = isinstance(event, Finished | Failed)
        for watcher in self.watchers:
            watcher.event(event)

    def settle(self, tally: Finished) -> None:
        """Called on the supervisor's loop, for a request whose client left."""
        for watcher in self.watchers:
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone
                self._loop.call_soon_threadsafe(watcher.settled, tally)

    def close(self) -> None:
        if not self.ended:
            self.ended = True
            self.cancel()
            for watcher in self.watchers:
                watcher.abandoned()


@dataclass(frozen=True)
class Indexed:
    """An event of one of several choices generated from one prompt (OpenAI's `n`)."""

    index: int
    event: Event


_END = object()


class Choices:
    """Several RequestStreams of one request read as one: events tagged with their choice.

    Closing it (or leaving its iteration early) closes every stream, so each
    generation is cancelled in the worker; a stopped worker raises WorkerStopped.
    """

    def __init__(self, streams: list[RequestStream]) -> None:
        self.streams = streams
        self._queue: asyncio.Queue = asyncio.Queue()

    @property
    def pending(self) -> bool:
        return not self._queue.empty()

    async def events(self) -> AsyncIterator[Indexed]:
        queue = self._queue

        async def pump(index: int, stream: RequestStream) -> None:
            try:
                async for event in stream.events():
                    queue.put_nowait(Indexed(index, event))
                queue.put_nowait(_END)
            except Exception as exc:  # WorkerStopped: the caller's to see
                queue.put_nowait(exc)

        tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(self.streams)]
        try:
            ended = 0
            while ended < len(tasks):
                item = await queue.get()
                if item is _END:
                    ended += 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            self.close()

    def close(self) -> None:
        for stream in self.streams:
            stream.close()
