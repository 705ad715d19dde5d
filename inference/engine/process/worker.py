"""A model worker: one process that owns one model's MLX state and serves it over ZeroMQ.

Three threads, each with one job:
- the main thread prepares prompts (template, tokens, grammar), because only it can
  interrupt a runaway template (SIGALRM, render_limit.time_limit);
- the engine thread (engine.Engine: scheduler.py plans, runner.py runs) owns MLX and runs the batch;
- the I/O thread owns the sockets: requests in, events out, status reports.
Other threads hand outgoing frames to the I/O thread through an inproc PUSH socket
of their own (ZeroMQ sockets are not thread-safe).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import os
import queue
import signal
import threading
from collections.abc import Callable

import zmq

from ...protocol import link, wire
from ...protocol.events import Failed, Finished
from ..acceleration.adapters import AdapterError
from ..acceleration.loader import LoadedModel
from ..loop.config import EngineConfig
from ..loop.engine import Engine
from ..prompting.prompt import PromptBuilder, PromptLimits, PromptRejected
from .worker_report import worker_status

log = logging.getLogger(__name__)

OUTBOX = "inproc://outbox"
MAX_TRACES = 4096  # request ids kept for log lines; far above any batch


class WorkerServer:
    """Serves one model at `address` (ipc://path or tcp://host:port) until SIGTERM.

    With a `secret`, only peers holding it are served (link.py: CURVE); on TCP,
    ZMTP heartbeats drop a peer silent for `link_timeout` seconds.
    """

    def __init__(
        self,
        *,
        model: str,
        address: str,
        loader: Callable[[], LoadedModel],
        config: EngineConfig,
        limits: PromptLimits,
        exit_with_parent: bool = False,
        secret: str = "",
        link_timeout: float = 6.0,
    ) -> None:
        self.model = model
        self.address = address
        self.secret = secret
        self.link_timeout = link_timeout
        self.engine = Engine(loader, config=config)
        self.limits = limits
        self.parent = os.getppid() if exit_with_parent else None
        self.context = zmq.Context()
        self.prepare_queue: queue.SimpleQueue = queue.SimpleQueue()
        self.stopping = threading.Event()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._engine_ids: dict[tuple[bytes, int], int] = {}  # (client, request id) -> engine id
        self._pending: set[tuple[bytes, int]] = set()  # received, not yet submitted
        self._cancelled: set[tuple[bytes, int]] = set()  # cancelled while pending
        self._traces: dict[tuple[bytes, int], str] = {}  # -> the web request's id, for logs
        self.frozen = 0
        # Frames for the I/O thread: appended from any thread, one wake-up per batch of them.
        self._outbox: list[tuple[bytes, bytes]] = []
        self._outbox_lock = threading.Lock()

    # -- main thread ----------------------------------------------------------

    def serve_forever(self) -> None:
        signal.signal(signal.SIGTERM, self._terminate)
        self.engine.start()
        self.builder = PromptBuilder(
            self.engine.loaded,
            limits=self.limits,
            draft_models=self.engine.runner.speculation.draft_models,
            name=self.model,
            history=self.engine.runner.history,
        )
        # What is loaded now lives as long as the process. Out of the collector's sight, it
        # no longer makes every full collection a stall of a decode step (147 ms over the
        # default model's 78,000 objects, measured; 0.3 ms once frozen).
        gc.collect()
        gc.freeze()
        self.frozen = gc.get_freeze_count()
        bound = threading.Event()
        io = threading.Thread(target=self._io, args=(bound,), name="worker-io", daemon=True)
        io.start()
        bound.wait()
        log.info("worker for %s serving at %s (pid %d)", self.model, self.address, os.getpid())
        try:
            while not self.stopping.is_set():
                try:
                    first = self.prepare_queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._prepare_waiting(first)
        except SystemExit:
            pass
        finally:
            self.stopping.set()
            self.engine.shutdown(timeout=5)
            io.join(2)
            if self.address.startswith("ipc://"):
                with contextlib.suppress(OSError):
                    os.unlink(self.address.removeprefix("ipc://"))

    def _terminate(self, signum, frame) -> None:
        raise SystemExit(0)

    def _prepare_waiting(self, first: tuple) -> None:
        """Build every waiting request, then submit them together.

        Requests that arrive together then share their first prefill step, as they
        would in one process, instead of each joining the batch a step later.
        """
        waiting, built = [first], []
        while waiting:
            client, request_id, call = waiting.pop(0)
            key = (client, request_id)
            prepared = self._build(key, call)
            if prepared is not None:
                built.append((key, prepared))
            else:
                self._forget(key)
                self._traces.pop(key, None)
            while True:
                try:
                    waiting.append(self.prepare_queue.get_nowait())
                except queue.Empty:
                    break
        try:
            self._submit(built)
        finally:
            for key, _ in built:
                self._forget(key)

    def _forget(self, key: tuple[bytes, int]) -> None:
        with self._lock:
            self._pending.discard(key)
            self._cancelled.discard(key)

    def _build(self, key: tuple[bytes, int], call):
        """The prepared request, or None once the client has its answer (or left)."""
        client, request_id = key
        with self._lock:
            if key in self._cancelled:
                return None
        try:
            prepared = self.builder.build(call)
        except PromptRejected as error:
            rejected = wire.Rejected(error.message, param=error.param, code=error.code)
            self._send(client, wire.encode("rejected", request_id, rejected))
            return None
        except Exception as exc:  # a bug, not the client's fault: the web side answers 500
            log.exception("preparing the request failed", extra=self._trace(key))
            failed = Failed(f"prompt preparation failed: {exc}")
            self._send(client, wire.encode_event(request_id, failed))
            return None
        if prepared.request is None:  # only counted
            accepted = wire.Accepted(prepared.prompt_tokens, prepared.warning)
            self._send(client, wire.encode("accepted", request_id, accepted))
            return None
        return self._with_checkpoint(call, prepared)

    def _with_checkpoint(self, call, prepared):
        """The request with its checkpoint key, resumed where an earlier attempt stopped."""
        runner = self.engine.runner
        if runner.checkpoints is None:
            return prepared
        try:
            request = runner.checkpoints.plan(call, prepared.request, runner.identity)
        except Exception:  # a checkpoint that cannot be read never fails the request
            log.exception("reading a checkpoint failed; generating afresh")
            return prepared
        return dataclasses.replace(prepared, request=request)

    def _emitter(self, key: tuple[bytes, int]) -> Callable:
        client, request_id = key

        def emit(event) -> None:
            if isinstance(event, Finished | Failed):
                with self._lock:
                    self._engine_ids.pop(key, None)
                self._log_end(key, event)
            self._send(client, wire.encode_event(request_id, event))

        return emit

    def _submit(self, built: list[tuple[tuple[bytes, int], object]]) -> None:
        """Accept and submit in one step every request whose client is still there."""
        with self._lock:
            # Those whose client left while their prompts were built are dropped here.
            kept = [(key, prepared) for key, prepared in built if key not in self._cancelled]
            for (client, request_id), prepared in kept:
                resume = prepared.request.resume
                accepted = wire.Accepted(
                    prepared.prompt_tokens,
                    prepared.warning,
                    resumed_from=len(resume.tokens) if resume is not None else 0,
                )
                self._send(client, wire.encode("accepted", request_id, accepted))
                log.info(
                    "request accepted: %d prompt tokens%s", accepted.prompt_tokens,
                    f", resumed at {accepted.resumed_from}" if accepted.resumed_from else "",
                    extra=self._trace((client, request_id)),
                )  # fmt: skip
            calls = [(prepared.request, self._emitter(key)) for key, prepared in kept]
            ids = self.engine.submit_many(calls) if calls else []
            for (key, _), engine_id in zip(kept, ids, strict=True):
                self._engine_ids[key] = engine_id

    def _send(self, client: bytes, frame: bytes) -> None:
        """Hand a frame to the I/O thread; callable from any thread. The I/O thread is
        woken only when the outbox was empty: a step's events for every row cost one
        wake-up, and go out as one message per client."""
        with self._outbox_lock:
            self._outbox.append((client, frame))
            if len(self._outbox) > 1:
                return
        push = getattr(self._local, "push", None)
        if push is None:
            push = self._local.push = self.context.socket(zmq.PUSH)
            push.connect(OUTBOX)
        push.send(b"")

    # -- I/O thread -----------------------------------------------------------

    def _io(self, bound: threading.Event) -> None:
        # Never drop an event for a slow client; a client that is gone is an error on send
        # (its generations are cancelled).
        options = ((zmq.SNDHWM, 0), (zmq.ROUTER_MANDATORY, 1))
        router, authenticator = link.serving_router(
            self.context, self.address, self.secret, self.link_timeout, options
        )
        outbox = self.context.socket(zmq.PULL)
        outbox.bind(OUTBOX)
        bound.set()
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        poller.register(outbox, zmq.POLLIN)
        try:
            while not self.stopping.is_set():
                ready = dict(poller.poll(1000))
                if outbox in ready:
                    self._drain(outbox, router)
                if router in ready:
                    while router.poll(0):
                        client, frame = router.recv_multipart()
                        self._receive(router, client, frame)
                if self.parent is not None and os.getppid() != self.parent:
                    log.warning("the supervisor is gone; worker for %s exits", self.model)
                    os.kill(os.getpid(), signal.SIGTERM)
                    self.parent = None
        finally:
            router.close(0)
            outbox.close(0)
            if authenticator is not None:
                authenticator.stop()

    def _drain(self, outbox, router) -> None:
        with contextlib.suppress(zmq.Again):
            while True:
                outbox.recv(zmq.NOBLOCK)  # the wake-ups: what they announce is in _outbox
        with self._outbox_lock:
            frames, self._outbox = self._outbox, []
        waiting: dict[bytes, list[bytes]] = {}
        for client, frame in frames:
            waiting.setdefault(client, []).append(frame)
        for client, frames in waiting.items():
            try:
                router.send_multipart([client, *frames])
            except zmq.ZMQError as error:
                if error.errno != zmq.EHOSTUNREACH:
                    raise
                for frame in frames:
                    self._client_gone(client, frame)

    def _client_gone(self, client: bytes, frame: bytes) -> None:
        """An event for a client whose link is gone (a web process died, a host was lost):
        its generation stops here rather than run to its end for nobody."""
        try:
            kind, request_id, _ = wire.decode(frame)
        except wire.WireError:
            return
        if kind not in ("finished", "failed", "rejected", "status"):
            log.debug("the client of request %s is gone; cancelling it", request_id)
            self._cancel((client, request_id))

    def _receive(self, router, client: bytes, frame: bytes) -> None:
        try:
            kind, request_id, payload = wire.decode(frame)
        except wire.WireError as exc:
            log.warning("dropped a malformed frame: %s", exc)
            return
        if kind == "generate":
            # A request dropped while parked ends unseen here: its id goes with the oldest.
            if len(self._traces) > MAX_TRACES:
                for stale in list(self._traces)[: MAX_TRACES // 2]:
                    self._traces.pop(stale, None)
            self._traces[(client, request_id)] = payload.request_id
            with self._lock:
                self._pending.add((client, request_id))
            self.prepare_queue.put((client, request_id, payload))
        elif kind == "cancel":
            self._cancel((client, request_id))
        elif kind in ("embed", "rerank"):  # the web side sends these only to their models
            refusal = wire.Rejected(
                f"The model '{self.model}' is a chat model: it cannot {kind}", param="model"
            )
            self._send(client, wire.encode("rejected", request_id, refusal))
        elif kind == "adapter":  # an operator's mount or unmount: between two steps
            self.engine.between_steps(
                functools.partial(self._adapters, client, request_id, payload)
            )
        elif kind == "report":
            with contextlib.suppress(zmq.ZMQError):  # EHOSTUNREACH: the asker is gone
                router.send_multipart([client, wire.encode("status", request_id, self.report())])

    def _adapters(self, client: bytes, request_id: int, call: wire.AdapterCall, runner) -> None:
        """On the engine thread: mount or unmount `call.adapter`, and say how it went."""
        adapters, busy, name = runner.adapters, runner.size > 0, call.adapter.name
        deferred = False
        try:
            if call.action == "mount":
                adapters.mount(call.adapter, busy=busy)
            elif (dropped := adapters.unmount(name, busy=busy)) is None:
                raise AdapterError(f"The adapter '{name}' is not mounted on {self.model}")
            else:
                deferred = not dropped
        except AdapterError as error:  # an unusable folder, or nothing to unmount
            code = "adapter_not_mounted" if call.action == "unmount" else "adapter_unusable"
            refusal = wire.Rejected(str(error), param="adapter", code=code)
            self._send(client, wire.encode("rejected", request_id, refusal))
            return
        report = adapters.report
        state = wire.AdapterState(report["mounted"], report["loaded"], deferred=deferred)
        self._send(client, wire.encode("adapters", request_id, state))
        log.info("adapter %s %sed on %s", name, call.action, self.model)

    def _trace(self, key: tuple[bytes, int]) -> dict:
        return {"request_id": self._traces.get(key, "")}

    def _log_end(self, key: tuple[bytes, int], event: Finished | Failed) -> None:
        extra = {"request_id": self._traces.pop(key, "")}
        if isinstance(event, Failed):
            log.warning("request failed: %s", event.message, extra=extra)
            return
        log.info(
            "request finished (%s): %d prompt tokens, %d cached, %d generated",
            event.finish_reason, event.prompt_tokens, event.cached_tokens,
            event.completion_tokens, extra=extra,
        )  # fmt: skip

    def _cancel(self, key: tuple[bytes, int]) -> None:
        if key in self._traces:
            log.info("request cancelled", extra=self._trace(key))
        with self._lock:
            engine_id = self._engine_ids.pop(key, None)
            if engine_id is None and key in self._pending:
                self._cancelled.add(key)  # still being prepared: never submit it
        if engine_id is not None:
            self.engine.cancel(engine_id)

    def report(self) -> wire.WorkerStatus:
        return worker_status(self.model, self.engine, self.frozen)
