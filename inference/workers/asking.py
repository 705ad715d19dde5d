"""Questions a worker answers once: its report (`report` -> `status`), an operator's
adapter mount or unmount (`adapter` -> `adapters`, or `rejected`). Each is a future the
supervisor's reader settles when the answer with its request id comes back."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import zmq

from ..protocol import wire
from .remote import send_now
from .worker import Worker


class WorkerQuestions:
    """The Supervisor's part that asks workers (it runs on the supervisor's loop)."""

    def live_status(
        self, model: str, timeout: float = 2.0, *, worker_id: str | None = None
    ) -> Future:
        """The worker's own report (`worker_id`'s, else a ready replica's of `model`), or
        None when it cannot answer within `timeout`; callable from any thread."""
        return self.call(self._live_status_of(model, worker_id, timeout))

    async def _live_status_of(self, model: str, worker_id: str | None, timeout: float):
        return await self._live_status(self._find(model, worker_id), timeout)

    def _find(self, model: str, worker_id: str | None) -> Worker | None:
        if worker_id is not None:
            return next((w for w in self.resident() if w.id == worker_id), None)
        group = self.models.get(model)
        return next(iter(group.serving()), None) if group is not None else None

    async def _ask(
        self, worker: Worker, socket, timeout: float, kind: str = "report", payload=None
    ):
        """The worker's answer to one question (its report, unless `kind` says otherwise).

        Raises TimeoutError when it cannot be asked (a remote worker's link is down) or
        does not answer in time.
        """
        request_id = next(self._request_ids)
        reply = self.loop.create_future()
        worker.reports[request_id] = reply
        try:
            frame = wire.encode(kind, request_id, wire.Empty() if payload is None else payload)
            if not send_now(socket, frame):
                raise TimeoutError  # a remote worker's link is down (a local one queues)
            return await asyncio.wait_for(reply, timeout)
        finally:
            worker.reports.pop(request_id, None)

    async def _live_status(self, worker: Worker | None, timeout: float) -> wire.WorkerStatus | None:
        if worker is None or worker.state != "ready" or worker.socket is None:
            return None
        try:
            worker.status = await self._ask(worker, worker.socket, timeout)
        except (TimeoutError, asyncio.CancelledError, zmq.ZMQError):
            return None
        return worker.status
