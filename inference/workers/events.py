"""The workers' lifecycle as events, for operators: `GET /api/events` streams them (SSE).

The supervisor's thread emits (starting, ready, draining, restarting, exit, load, evict,
unload, and an operator's adapter_mount and adapter_unmount); each reader gets them on its own event loop through a bounded queue. The last
KEEP events stay, so a reader that reconnects with `Last-Event-ID` misses none of them;
a reader too slow to keep up is told so and dropped (it reconnects and replays).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field

KEEP = 512  # events kept for replay
QUEUE = 256  # events a reader may fall behind by before it is dropped

KINDS = (
    "starting", "ready", "draining", "restarting", "exit", "load", "evict", "unload",
    "adapter_mount", "adapter_unmount",
)  # fmt: skip


@dataclass(frozen=True)
class WorkerEvent:
    id: int
    kind: str
    model: str
    worker: str  # the worker's id (model, or model#replica)
    time: float  # Unix seconds
    detail: dict = field(default_factory=dict)  # exit: code or signal; evict: why

    def as_json(self) -> dict:
        return asdict(self)


class Reader:
    """One SSE reader's queue, fed from the supervisor's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[WorkerEvent | None] = asyncio.Queue(maxsize=QUEUE)
        self.dropped = False

    def offer(self, event: WorkerEvent) -> None:
        """On the reader's loop: queue the event, or drop a reader that fell behind (None
        wakes it to end its stream)."""
        if self.dropped:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped = True
            self.queue.get_nowait()  # room for the end marker
            self.queue.put_nowait(None)


class EventLog:
    def __init__(self, keep: int = KEEP) -> None:
        self._lock = threading.Lock()
        self._kept: deque[WorkerEvent] = deque(maxlen=keep)
        self._ids = itertools.count(1)
        self._readers: set[Reader] = set()

    def emit(self, kind: str, model: str, worker: str, **detail) -> WorkerEvent:
        """Record an event and hand it to every reader; any thread may call it."""
        with self._lock:
            event = WorkerEvent(next(self._ids), kind, model, worker, time.time(), detail)
            self._kept.append(event)
            readers = list(self._readers)
        for reader in readers:
            try:
                reader.loop.call_soon_threadsafe(reader.offer, event)
            except RuntimeError:  # its loop is closed: the reader is gone
                self.leave(reader)
        return event

    def join(self, after: int = 0) -> tuple[Reader, list[WorkerEvent]]:
        """A reader on the running loop, and the kept events after id `after` (replay)."""
        reader = Reader(asyncio.get_running_loop())
        with self._lock:
            self._readers.add(reader)
            missed = [event for event in self._kept if event.id > after]
        return reader, missed

    def leave(self, reader: Reader) -> None:
        with self._lock:
            self._readers.discard(reader)

    def recent(self, count: int = 50) -> list[WorkerEvent]:
        with self._lock:
            return list(self._kept)[-count:]
