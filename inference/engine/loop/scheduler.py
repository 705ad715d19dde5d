"""The scheduler: which requests join the batch, which wait, which leave. It never touches mx.

Requests and cancellations arrive through a queue from any thread. One adapter set is
active per batch (adapters.py): a request for another set parks, in order, until the
batch drains, and then its set becomes the batch's. The runner (runner.py) carries out
each step's plan; the engine (engine.py) calls the two in turn, as nano-vllm does.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ...protocol.events import Event
from ..acceleration.adapters import adapter_key
from ..prompting.request import GenerationRequest


@dataclass(frozen=True)
class Pending:
    """A submitted request, not yet in the batch."""

    request_id: int
    request: GenerationRequest
    emit: Callable[[Event], None]

    @property
    def adapter_key(self) -> tuple[str, ...]:
        return adapter_key(self.request.adapters)


@dataclass
class Plan:
    """One step's decisions: who joins (under which adapter set), who leaves."""

    adapter_key: tuple[str, ...] = ()
    calls: list[Callable] = field(default_factory=list)  # run on the engine thread first
    admit: list[Pending] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)  # request ids, in the batch or not
    dropped: int = 0  # parked requests cancelled before they ever ran


class Scheduler:
    def __init__(self) -> None:
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._parked: collections.deque[Pending] = collections.deque()
        self.adapter_key: tuple[str, ...] = ()  # the batch's adapter set
        self._in_flight = 0
        self._count_lock = threading.Lock()  # in_flight moves on two threads

    # -- any thread -------------------------------------------------------------

    def submit(self, request: GenerationRequest, emit: Callable[[Event], None]) -> int:
        request_id = next(self._ids)
        self._count(+1)
        self._inbox.put(("submit", Pending(request_id, request, emit)))
        return request_id

    def submit_many(
        self, calls: list[tuple[GenerationRequest, Callable[[Event], None]]]
    ) -> list[int]:
        """Submit requests that are admitted in one step (so equal prompts share a prefill)."""
        pending = [Pending(next(self._ids), request, emit) for request, emit in calls]
        self._count(+len(pending))
        self._inbox.put(("submit_many", pending))
        return [each.request_id for each in pending]

    def cancel(self, request_id: int) -> None:
        self._inbox.put(("cancel", request_id))

    def call(self, function: Callable) -> None:
        """Run `function(runner)` on the engine thread before the next step (an operator's
        adapter mount, say): never while a step runs."""
        self._inbox.put(("call", function))

    def wake(self) -> None:
        self._inbox.put(("wake", None))

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet finished, failed or cancelled."""
        return self._in_flight

    # -- the engine thread ----------------------------------------------------

    def schedule(self, batch_size: int) -> Plan:
        """Take every queued message, waiting (briefly) for one while there is nothing to do."""
        plan = Plan(adapter_key=self.adapter_key)
        idle = batch_size == 0 and not self._parked
        for kind, payload in self._take(block=idle):
            if kind == "submit":
                self._accept(payload, batch_size, plan)
            elif kind == "submit_many":
                for pending in payload:
                    self._accept(pending, batch_size, plan)
            elif kind == "cancel":
                self._cancel(payload, plan)
            elif kind == "call":
                plan.calls.append(payload)
        if batch_size == 0 and not plan.admit and self._parked:
            self._unpark(plan)
        return plan

    def ended(self, count: int) -> None:
        """`count` requests left for good (finished, failed, cancelled)."""
        if count:
            self._count(-count)

    def _take(self, *, block: bool) -> list:
        try:
            messages = [self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()]
        except queue.Empty:
            return []
        while True:
            try:
                messages.append(self._inbox.get_nowait())
            except queue.Empty:
                return messages

    def _accept(self, pending: Pending, batch_size: int, plan: Plan) -> None:
        """Admit now, or park behind earlier requests for another adapter set."""
        busy = batch_size > 0 or bool(plan.admit)
        if self._parked or (busy and pending.adapter_key != self.adapter_key):
            self._parked.append(pending)
            return
        self.adapter_key = plan.adapter_key = pending.adapter_key
        plan.admit.append(pending)

    def _unpark(self, plan: Plan) -> None:
        """The batch has drained: switch to the oldest waiting set and admit its requests."""
        key = self._parked[0].adapter_key
        self.adapter_key = plan.adapter_key = key
        waiting, self._parked = self._parked, collections.deque()
        for pending in waiting:
            (plan.admit if pending.adapter_key == key else self._parked).append(pending)

    def _cancel(self, request_id: int, plan: Plan) -> None:
        for pending in self._parked:
            if pending.request_id == request_id:
                self._parked.remove(pending)
                plan.dropped += 1
                self.ended(1)
                return
        plan.cancel.append(request_id)

    def _count(self, delta: int) -> None:
        with self._count_lock:
            self._in_flight += delta
