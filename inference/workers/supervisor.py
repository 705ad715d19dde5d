"""The supervisor: starts a model's worker processes on demand, watches them, restarts them.

It runs on a thread of its own with its own asyncio loop, which owns every ZeroMQ
socket and child process; request handlers on any other loop reach it through
`run_coroutine_threadsafe`. Which models stay resident, and how an evicted or idle
one stops, is residency.py's part; what a worker answers once (its report, an adapter's
mount) is asking.py's, and an operator's adapter mounts are adapter_mounts.py's.

A model may have several replicas (`config.replicas` local processes, `config.remote`
workers on other hosts, remote.py): each request goes to one that serves, as
routing.py chooses; one that is dead, restarting or drained gets none. A draft model's
companion worker, beside its target's, is companions.py's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import subprocess
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import zmq
import zmq.asyncio

from ..protocol import wire
from .adapter_mounts import AdapterMounts
from .asking import WorkerQuestions
from .companions import Companions
from .events import EventLog
from .remote import RemoteWorkers, send_now
from .residency import Residency
from .routing import Candidate, RouteKey, route_key
from .streams import STOPPED, Deliveries, EngineUnavailable, ExitStatus, RequestStream
from .worker import FINAL_KINDS, Replicas, SupervisorConfig, Worker, exit_status

LEFT_SECONDS = 60.0  # how long a cancelled request's tally is waited for

log = logging.getLogger(__name__)


class Supervisor(Residency, RemoteWorkers, WorkerQuestions, AdapterMounts, Companions):
    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self.models: dict[str, Replicas] = {}  # model name -> its replicas
        self.events = EventLog()  # the workers' lifecycle, for GET /api/events
        self._ids = itertools.count(1)
        self._request_ids = itertools.count(1)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="worker-supervisor", daemon=True)
        self._started = threading.Event()
        self._closed = False
        self._thread.start()
        self._started.wait()

    # -- called from any thread or loop ------------------------------------------------

    def call(self, coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def open(self, model: str, path: str, call: wire.WorkerCall, *, size_bytes=0):
        """Send `call` (a generation or an embeddings call) to the model's worker, starting
        it if needed; its RequestStream.

        Raises EngineUnavailable when no worker can take it in time.
        """
        stream = RequestStream(asyncio.get_running_loop())
        try:
            await asyncio.wrap_future(self.call(self._open(model, path, size_bytes, call, stream)))
        except asyncio.CancelledError:  # the client left while its request was on its way
            stream.close()
            raise
        return stream

    def ensure(self, model: str, path: str, *, size_bytes: int = 0, wait: bool = True) -> None:
        """Make the model resident (blocking until ready, unless not `wait`)."""
        future = self.call(self._ready_worker(model, path, size_bytes))
        if wait:
            future.result()

    def unload(self, model: str) -> bool:
        return self.call(self._unload(model)).result()

    def drain_model(self, model: str) -> bool:
        """Stop admitting to the model's local workers, let them finish what they hold, then
        stop them (in the background); the next request loads it again. False when it has
        none."""
        return self.call(self._begin_unload(model)).result()

    def drain(self, worker_id: str) -> Future:
        """Take one replica out of rotation: it finishes its streams, then a local one
        restarts and rejoins; a remote one rejoins once its host restarts it. False when no
        replica has that id."""
        return self.call(self._drain_replica(worker_id))

    def undrain(self, worker_id: str) -> Future:
        """End a replica's drain: it takes new requests again. False when no replica has
        that id."""
        return self.call(self._undrain_replica(worker_id))

    @property
    def workers(self) -> dict[str, Worker]:
        """Each resident model's first replica, for callers that know one worker a model."""
        return {name: group.workers[0] for name, group in self.models.items() if group.workers}

    def resident(self) -> list[Worker]:
        """Every replica of every resident model, model by model, in replica order."""
        groups = list(self.models.values())
        return [w for group in groups for w in list(group.workers) if w.state != "stopped"]

    def ready_models(self) -> list[str]:
        return sorted({w.model for w in self.resident() if w.state == "ready"})

    def routing_report(self, worker: Worker) -> dict | None:
        """What the model's router did with this replica; None for a model of one replica."""
        group = worker.group
        if group is None or len(group.workers) < 2:
            return None
        return group.router.report(worker.id)

    def shutdown(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.call(self._stop_all(timeout)).result(timeout + 2)
        except Exception:
            log.exception("stopping the model workers failed")
        self.call(self._quiesce()).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(2)

    async def _quiesce(self) -> None:
        """Cancel the loop's own tasks and close the sockets' context before the loop stops."""
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.context.term()

    # -- the supervisor's loop ---------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.context = zmq.asyncio.Context()
        self._residency = asyncio.Lock()
        self.loop.create_task(self._housekeeping())
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    async def _open(self, model, path, size_bytes, call, stream: RequestStream) -> None:
        worker, key = await self._ready_worker(model, path, size_bytes, call)
        if self._drafts_beside(worker, call):
            call = await self._with_companion(worker, call)
            if not worker.serving:  # it stopped while its companion loaded
                worker, key = await self._ready_worker(model, path, size_bytes, call)
        request_id = next(self._request_ids)
        # Encoded first: a call that cannot be (wire.Unencodable) leaves nothing behind.
        frame = wire.encode(wire.CALL_KINDS[type(call)], request_id, call)
        socket = worker.socket
        worker.streams[request_id] = stream
        stream.route = key
        worker.last_used = time.monotonic()
        if stream.ended:  # the caller left while this was on its way
            worker.streams.pop(request_id, None)
            return
        stream.worker_state = lambda: worker.state
        stream.count_only = getattr(call, "count_only", False)
        stream.cancel = lambda: self.loop.call_soon_threadsafe(
            self._cancel, worker, socket, request_id
        )
        if worker.remote:
            self._send_remote(worker, socket, frame)
        else:
            await socket.send(frame)

    def _cancel(self, worker: Worker, socket, request_id: int) -> None:
        stream = worker.streams.pop(request_id, None)
        if stream is not None and socket is worker.socket:
            send_now(socket, wire.encode("cancel", request_id))  # no link: gone there too
            now = time.monotonic()
            for old in [i for i, (t, _) in worker.leaving.items() if now - t > LEFT_SECONDS]:
                del worker.leaving[old]
            if stream.watchers:
                worker.leaving[request_id] = (now, stream)
            worker.notify()

    async def _ready_worker(
        self, model: str, path: str, size_bytes: int, call=None
    ) -> tuple[Worker, RouteKey | None]:
        """A replica of the model that serves, once one does: started, waited for, or
        refused; and the key it was routed by (_route).

        A request counts as waiting on the replicas it first finds; a drain serves those
        before they stop, so an eviction never starves a request already waiting.
        """
        deadline = None
        group: Replicas | None = None
        try:
            while True:
                if group is not None and group.stopped:  # stopped under us
                    group.waiters -= 1
                    group = None
                if group is None:
                    group = await self._resident_replicas(model, path, size_bytes)
                    group.waiters += 1
                if serving := group.serving():
                    return self._route(group, serving, call)
                group.refuse_if_hopeless()
                if deadline is None:
                    patience = group.patience(self.config.wait_seconds, self.config.load_seconds)
                    deadline = time.monotonic() + patience
                try:
                    await asyncio.wait_for(group.changed.wait(), deadline - time.monotonic())
                except TimeoutError:
                    worker = (group.live() or group.workers)[0]
                    raise EngineUnavailable(worker.unready_reason(), worker.state) from None
        finally:
            if group is not None:
                group.waiters -= 1
                group.notify()

    def _route(
        self, group: Replicas, serving: list[Worker], call
    ) -> tuple[Worker, RouteKey | None]:
        """The replica for `call`, and the key it was routed by (None: one replica)."""
        if len(group.workers) == 1 or call is None:
            return serving[0], None
        candidates = [Candidate(w.id, len(w.streams)) for w in serving]
        key = route_key(call)
        chosen, _ = group.router.choose(candidates, key)
        return next(w for w in serving if w.id == chosen), key

    def _spawn(self, group: Replicas, replica: int, size_bytes: int) -> Worker:
        worker_id = f"w{next(self._ids)}"
        self.config.socket_dir.mkdir(parents=True, exist_ok=True)
        address = f"ipc://{self.config.socket_dir / f'{os.getpid()}-{worker_id}.sock'}"
        worker = Worker(
            worker_id, group.model, group.path, address, size_bytes, replica=replica, group=group
        )
        group.workers.append(worker)
        self._launch(worker)
        return worker

    def _launch(self, worker: Worker) -> None:
        """Start the worker's process and a fresh socket to it; messages of the last one die."""
        if worker.socket_path:
            Path(worker.socket_path).unlink(missing_ok=True)
        companion = worker.role == "companion"
        command = self.config.companion_command if companion else self.config.command
        argv = command(worker.model, worker.path, worker.address)
        # A process group of its own, in the lab's session: a terminal's Ctrl-C reaches the
        # lab, which stops its workers; a worker whose parent dies exits by itself.
        worker.process = subprocess.Popen(argv, process_group=0)
        worker.pid = worker.process.pid
        worker.status = None
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, 0)  # events are never dropped on the way in
        socket.connect(worker.address)
        worker.socket = socket
        worker.reader = self.loop.create_task(self._read(worker, socket))
        process = worker.process
        threading.Thread(
            target=lambda: self.loop.call_soon_threadsafe(
                self._exited, worker, process, process.wait()
            ),
            name=f"wait-{worker.id}",
            daemon=True,
        ).start()
        self.loop.create_task(self._await_ready(worker, socket))
        beside = {"role": "companion", "primary": worker.primary} if companion else {}
        self.events.emit("starting", worker.model, worker.id, pid=worker.pid, **beside)
        log.info("started worker %s for %s (pid %d)", worker.id, worker.model, worker.pid)

    async def _await_ready(self, worker: Worker, socket) -> None:
        wait = self.config.wait_seconds if worker.remote else self.config.load_seconds
        try:
            status = await self._ask(worker, socket, wait)
        except (TimeoutError, asyncio.CancelledError, zmq.ZMQError):
            if socket is worker.socket and worker.process is not None:
                log.error("worker %s for %s did not load in time", worker.id, worker.model)
                worker.process.kill()
            return
        if worker.remote and not self._serves_its_model(worker, status):
            return
        if socket is worker.socket and worker.role == "primary":
            await self._remount(worker, socket)  # its model's mounted adapters, first
        if socket is worker.socket:
            worker.status = status
            worker.state = "ready"
            worker.start_failures = 0
            worker.notify()
            self.events.emit("ready", worker.model, worker.id)

    async def _read(self, worker: Worker, socket) -> None:
        while True:
            try:  # a worker sends what it had waiting for this process as one message
                frames = await socket.recv_multipart()
            except (asyncio.CancelledError, zmq.ZMQError):
                return
            batch = Deliveries()
            for frame in frames:
                try:
                    self._take(worker, *wire.decode(frame), batch)
                except wire.WireError as exc:
                    log.warning("worker %s sent a malformed frame: %s", worker.id, exc)
            batch.send()

    def _take(self, worker: Worker, kind: str, request_id: int, payload, batch) -> None:
        if request_id in worker.reports:  # an answer to a question (asking.py)
            if not (reply := worker.reports[request_id]).done():
                reply.set_result(payload)
            return
        stream = worker.streams.get(request_id)
        if stream is None:  # cancelled: only its tally is still wanted
            left = worker.leaving.pop(request_id, None) if kind in FINAL_KINDS else None
            if left is not None and kind == "finished":
                left[1].settle(payload)
            return
        stream.deliver_later(kind, payload, batch)
        if kind == "finished" and stream.route is not None and worker.group is not None:
            # Its cached_tokens say what the replica still held: the router learns it.
            worker.group.router.observe(
                worker.id, stream.route, payload.prompt_tokens, payload.cached_tokens
            )
        if kind in FINAL_KINDS or (kind == "accepted" and stream.count_only):
            worker.streams.pop(request_id, None)
            worker.notify()

    def _exited(self, worker: Worker, process: subprocess.Popen, returncode: int) -> None:
        if process is not worker.process:
            return
        status = exit_status(returncode)
        worker.last_exit = status
        worker.pid = None
        worker.process = None
        expected = worker.state == "stopped" or (worker.drained and worker.state == "restarting")
        self.events.emit("exit", worker.model, worker.id, **status.as_dict(), expected=expected)
        if worker.state == "stopped":  # we stopped it
            self._close_socket(worker, status)
            worker.notify()
            return
        if worker.drained and worker.state == "restarting":  # a drain's restart: at once
            worker.drained = False
            self._close_socket(worker, status)
            self._restart(worker)
            return
        worker.drained = False  # died while draining: its restart is the drain's end
        log.error("worker %s for %s stopped (%s)", worker.id, worker.model, status.describe())
        if worker.state == "starting":
            worker.start_failures += 1
        if worker.start_failures >= self.config.max_start_failures:
            worker.state = "stopped"
            worker.failure = (
                f"the worker for {worker.model} could not load it ({status.describe()})"
            )
            group = worker.group
            if group is not None and not group.live() and self.models.get(group.model) is group:
                self.models.pop(group.model)  # the next request tries a new load
        else:
            worker.state = "restarting"
            worker.restarts += 1
            delay = min(0.5 * 2**worker.start_failures, 10.0)
            self.events.emit("restarting", worker.model, worker.id, after_seconds=delay)
            self.loop.call_later(delay, self._restart, worker)
        # The state is set first: the requests told below report it.
        self._close_socket(worker, status)
        worker.notify()

    def _restart(self, worker: Worker) -> None:
        group = worker.group
        current = group is not None and not group.stopped and self.models.get(group.model) is group
        if worker.state == "restarting" and current:
            self._launch(worker)
            worker.state = "starting"
            worker.notify()

    def _end_requests(self, worker: Worker, status: ExitStatus | None) -> None:
        streams, worker.streams = worker.streams, {}
        worker.leaving.clear()
        for stream in streams.values():
            stream.deliver(STOPPED, status)
        for reply in worker.reports.values():
            if not reply.done():
                reply.cancel()

    def _close_socket(self, worker: Worker, status: ExitStatus | None) -> None:
        self._end_requests(worker, status)
        if worker.watcher is not None:
            worker.watcher.cancel()
        if worker.reader is not None:
            worker.reader.cancel()
        if worker.socket is not None:
            worker.socket.close(0)
        worker.socket = None
