"""A companion worker: one process that runs a draft model for the workers of its target
(role `companion` beside their role `primary`, as mlx-bun's workers report).

It answers the target's engine (drafts/companion.py) with each row's greedy draft tokens,
keeping the row's draft-model KV cache between questions, and the supervisor's `report`
like any worker, so it is started, watched and restarted as one. One thread does it all:
questions are answered in order, each a few decode steps of a small model. A target that
dies never releases its rows; the oldest go once MAX_ROWS are held.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict

import mlx.core as mx
import zmq

from ...protocol import wire
from ...protocol.sampling import MAX_DRAFT_TOKENS
from ..acceleration.loader import load_model
from ..drafts.draft_model import ModelDrafter

log = logging.getLogger(__name__)

MAX_ROWS = 64  # rows whose caches are kept; the least recently asked go first


class CompanionServer:
    """Serves one draft model's drafts at `address` (ipc://path) until SIGTERM."""

    def __init__(self, *, model: str, path: str, address: str, exit_with_parent=False) -> None:
        self.model, self.path, self.address = model, path, address
        self.parent = os.getppid() if exit_with_parent else None
        self.rows: OrderedDict[tuple[bytes, int], tuple[list[int], ModelDrafter]] = OrderedDict()
        self.questions = 0
        self.drafted = 0
        self.seconds = 0.0  # spent answering questions

    def serve_forever(self) -> None:
        signal.signal(signal.SIGTERM, self._terminate)
        # Loaded before the socket is bound: the supervisor's first report question is
        # answered once the companion can draft.
        self.draft_model = load_model(self.path).model
        context = zmq.Context()
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(self.address)
        log.info("companion for %s serving at %s (pid %d)", self.model, self.address, os.getpid())
        try:
            while True:
                if router.poll(1000):
                    client, frame = router.recv_multipart()
                    self._receive(router, client, frame)
                if self.parent is not None and os.getppid() != self.parent:
                    log.warning("the supervisor is gone; companion for %s exits", self.model)
                    return
        except SystemExit:
            pass
        finally:
            router.close(0)
            context.term()
            if self.address.startswith("ipc://"):
                with contextlib.suppress(OSError):
                    os.unlink(self.address.removeprefix("ipc://"))

    def _terminate(self, signum, frame) -> None:
        raise SystemExit(0)

    def _receive(self, router, client: bytes, frame: bytes) -> None:
        try:
            kind, request_id, payload = wire.decode(frame)
        except wire.WireError as exc:
            log.warning("dropped a malformed frame: %s", exc)
            return
        if kind == "draft":
            answer = wire.encode("drafts", request_id, wire.Drafts(self._draft(client, payload)))
        elif kind == "release":
            self.rows.pop((client, request_id), None)
            return
        elif kind == "report":
            answer = wire.encode("status", request_id, self.report())
        else:
            refusal = wire.Rejected(f"a draft model's companion cannot {kind}")
            answer = wire.encode("rejected", request_id, refusal)
        with contextlib.suppress(zmq.ZMQError):  # the asker is gone
            router.send_multipart([client, answer])

    def _draft(self, client: bytes, call: wire.DraftCall) -> list[int]:
        """The row's history as the target now holds it, and its greedy continuation."""
        started = time.perf_counter()
        key = (client, call.row)
        held, drafter = self.rows.pop(key, None) or ([], ModelDrafter(self.draft_model))
        history = held[: call.keep] + call.tail
        self.rows[key] = (history, drafter)
        while len(self.rows) > MAX_ROWS:
            self.rows.popitem(last=False)
        drafter.limit = MAX_DRAFT_TOKENS  # the target says how many it wants
        tokens = drafter.propose(history, call.limit) if history else []
        self.questions += 1
        self.drafted += len(tokens)
        self.seconds += time.perf_counter() - started
        return tokens

    def report(self) -> wire.WorkerStatus:
        return wire.WorkerStatus(
            model=self.model,
            pid=os.getpid(),
            in_flight=len(self.rows),
            active_bytes=mx.get_active_memory(),
            cache_bytes=mx.get_cache_memory(),
            peak_bytes=mx.get_peak_memory(),
            stats={
                "role": "companion",
                "rows": len(self.rows),
                "questions": self.questions,
                "drafted_tokens": self.drafted,
                "seconds_per_question": round(self.seconds / max(self.questions, 1), 6),
            },
        )
