"""Workers started on other hosts: the supervisor connects to them instead of spawning.

A model named in `config.remote` (MLXLAB_WORKERS, at one address or several: each a
replica) is served by workers that an operator started elsewhere (`manage.py modelworker
--listen tcp://HOST:PORT`); link.py authenticates the link. The supervisor never evicts
or unloads such a worker. Its socket's monitor tells when the link is lost (the worker
died, its host went away, the heartbeats went unanswered): the requests it held end as
they would for a dead local worker, it takes no new ones, and ZeroMQ reconnects by
itself; the worker is back in rotation once it answers.
"""

from __future__ import annotations

import asyncio
import logging

import zmq
from zmq.utils.monitor import parse_monitor_message

from ..protocol import link, wire
from .streams import ExitStatus
from .worker import Replicas, Worker

log = logging.getLogger(__name__)


def send_now(socket, frame: bytes) -> bool:
    """Send `frame` without waiting; False when it cannot go now (no live link).

    An asyncio socket's send returns a future, settled at once under NOBLOCK.
    """
    sent = socket.send(frame, zmq.NOBLOCK)
    return not (sent.done() and sent.exception() is not None)


class RemoteWorkers:
    """The Supervisor's part for remote workers (it runs on the supervisor's loop)."""

    def _attach(self, group: Replicas, replica: int, address: str, size_bytes: int) -> Worker:
        model = group.model
        worker = Worker(
            f"r{next(self._ids)}", model, group.path, address, size_bytes,
            remote=True, replica=replica, group=group,
        )  # fmt: skip
        group.workers.append(worker)
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, 0)
        # Frames go out only on a live link: none wait in a queue for a worker that may
        # come back as another process, knowing nothing of them.
        socket.setsockopt(zmq.IMMEDIATE, 1)
        socket.setsockopt(zmq.RECONNECT_IVL, 200)
        socket.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)
        if address.startswith("tcp://"):
            link.heartbeat(socket, self.config.link_timeout)
            if self.config.secret:
                link.secure_client(socket, self.config.secret)
        monitor = socket.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | link.HANDSHAKE_FAILED
        )
        socket.connect(address)
        worker.socket = socket
        worker.reader = self.loop.create_task(self._read(worker, socket))
        worker.watcher = self.loop.create_task(self._watch_link(worker, socket, monitor))
        log.info("connecting to the worker for %s at %s", model, address)
        return worker

    async def _watch_link(self, worker: Worker, socket, monitor) -> None:
        try:
            while True:
                event = parse_monitor_message(await monitor.recv_multipart())["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    if worker.link_error:
                        log.info("the worker at %s took the link", worker.address)
                    worker.link_error = None
                    self.loop.create_task(self._await_ready(worker, socket))
                elif event == zmq.EVENT_DISCONNECTED:
                    self._link_lost(worker)
                elif event & link.HANDSHAKE_FAILED and not worker.link_error:
                    worker.link_error = (
                        f"the worker for {worker.model} at {worker.address} refused this lab's "
                        "link: its MLXLAB_WORKER_SECRET is not this lab's"
                    )
                    log.error("%s", worker.link_error)
                    worker.notify()
        except (asyncio.CancelledError, zmq.ZMQError):
            pass
        finally:
            monitor.close(0)

    def _link_lost(self, worker: Worker) -> None:
        """What a dead local worker's exit is: its requests end, it counts a restart."""
        worker.drained = False  # its host restarts it (a drain's end): back once it answers
        if worker.state != "ready":  # it never came (back) up: nothing it held to end
            return
        status = ExitStatus(None, None, link=worker.address)
        log.error("worker %s for %s: %s", worker.id, worker.model, status.describe())
        worker.last_exit = status
        worker.state = "restarting"
        worker.restarts += 1
        worker.pid = None
        self.events.emit("exit", worker.model, worker.id, **status.as_dict(), expected=False)
        self._end_requests(worker, status)
        worker.notify()

    def _send_remote(self, worker: Worker, socket, frame: bytes) -> None:
        """Send now or never: a link lost just now ends the request as a dead worker would."""
        if not send_now(socket, frame):
            self._link_lost(worker)

    def _serves_its_model(self, worker: Worker, status: wire.WorkerStatus) -> bool:
        """The worker's report names the model it was named for (else it is refused)."""
        if status.model != worker.model:
            worker.link_error = (
                f"the worker at {worker.address} serves {status.model}, not {worker.model}"
            )
            log.error("%s", worker.link_error)
            worker.notify()
            return False
        worker.pid = status.pid  # on its own host
        return True
