"""The worker of an embedding model: one thread that reads the socket and runs the model.

An embeddings call is one answer, not a stream, so a single loop serves it: it reads what
came in, then embeds every waiting call's inputs together (calls that arrive together
share forward passes, as one call's inputs do), and between forward passes answers status
reports and notes cancels and new calls. It speaks the worker protocol (wire.py): `embed`
in, `embedded` (or `rejected`, or a Failed event) out; `generate` is refused, as the web
side already does for a model that only embeds.

A reranker's worker is the same loop with `rerank` calls in and `reranked` answers out:
its (query, document) pairs are batched as embedding inputs are. Each worker serves the
one call kind its model's task names and refuses the other.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import zmq

from ...protocol import link, wire
from ...protocol.embedding_folder import RERANK, EmbeddingSpec
from ...protocol.embeddings import EmbedCall, Embedded, RerankCall, Reranked
from ...protocol.events import Failed
from ..acceleration.accelerator import device_name
from ..acceleration.cpu_fast_path import blas_state
from ..embedding.embedder import Embedder, InputRejected
from ..embedding.models import load_embedding_model
from ..embedding.reranker import Reranker, load_reranker

log = logging.getLogger(__name__)

POLL_MS = 500


def _exit(signum, frame) -> None:
    raise SystemExit(0)


@dataclass(eq=False)  # one call is itself, however alike two calls' fields are
class _Waiting:
    client: bytes
    request_id: int
    call: EmbedCall | RerankCall
    inputs: list | None = None  # token lists, or a reranker's Pairs


class EmbeddingWorkerServer:
    """Serves one embedding model at `address` (ipc://path or tcp://host:port) until SIGTERM."""

    def __init__(
        self,
        *,
        model: str,
        path: str | Path,
        spec: EmbeddingSpec,
        address: str,
        batch_tokens: int,
        exit_with_parent: bool = False,
        secret: str = "",
        link_timeout: float = 6.0,
    ) -> None:
        self.model = model
        self.path = Path(path)
        self.spec = spec
        self.address = address
        self.batch_tokens = batch_tokens
        self.parent = os.getppid() if exit_with_parent else None
        self.secret = secret
        self.link_timeout = link_timeout
        self.waiting: list[_Waiting] = []
        self.running: list[_Waiting] = []  # the calls of the forward passes under way
        self.counts = {"completed": 0, "rejected": 0, "failed": 0, "cancelled": 0}
        self.seconds = 0.0

    def serve_forever(self) -> None:
        signal.signal(signal.SIGTERM, _exit)
        self.embedder = self._load()
        context = zmq.Context()
        router, authenticator = link.serving_router(
            context, self.address, self.secret, self.link_timeout
        )
        log.info("embedding worker for %s serving at %s (pid %d)",
                 self.model, self.address, os.getpid())  # fmt: skip
        try:
            while True:
                if self.waiting:
                    self._embed_waiting(router)
                elif router.poll(POLL_MS):
                    self._read(router)
                self._check_parent()
        except SystemExit:
            pass
        finally:
            router.close(0)
            if authenticator is not None:
                authenticator.stop()
            context.term()
            if self.address.startswith("ipc://"):
                Path(self.address.removeprefix("ipc://")).unlink(missing_ok=True)

    def _load(self) -> Embedder | Reranker:
        """An Embedder, or a reranker's Reranker (the same inputs_of/vectors/stats)."""
        if self.spec.task == RERANK:
            loaded = load_reranker(self.path, self.spec)
            return Reranker(loaded, name=self.model, batch_tokens=self.batch_tokens)
        loaded = load_embedding_model(self.path, self.spec)
        return Embedder(loaded, name=self.model, batch_tokens=self.batch_tokens)

    @property
    def call_kind(self) -> str:
        """The one call this worker serves: "rerank" for a reranker, else "embed"."""
        return "rerank" if self.spec.task == RERANK else "embed"

    def _refusal(self) -> wire.Rejected:
        """The answer to a call of another kind (generate, or the other task's)."""
        if self.spec.task == RERANK:
            served = "a reranker: it serves /v1/rerank only"
        else:
            served = "an embedding model: it serves /v1/embeddings only"
        return wire.Rejected(
            f"The model '{self.model}' is {served}", param="model", code="model_not_supported"
        )

    def _check_parent(self) -> None:
        if self.parent is not None and os.getppid() != self.parent:
            log.warning("the supervisor is gone; embedding worker for %s exits", self.model)
            raise SystemExit(0)

    # -- the socket ---------------------------------------------------------------------

    def _read(self, router) -> None:
        """Everything that has come in, without waiting."""
        while router.poll(0):
            client, frame = router.recv_multipart()
            try:
                kind, request_id, payload = wire.decode(frame)
            except wire.WireError as error:
                log.warning("dropped a malformed frame: %s", error)
                continue
            if kind == "report":
                self._send(router, client, "status", request_id, self.report())
            elif kind == self.call_kind:
                self.waiting.append(_Waiting(client, request_id, payload))
            elif kind == "cancel":
                self._cancel(client, request_id)
            elif kind in ("generate", "embed", "rerank", "adapter"):
                self._send(router, client, "rejected", request_id, self._refusal())

    def _cancel(self, client: bytes, request_id: int) -> None:
        for calls in (self.waiting, self.running):
            kept = [c for c in calls if (c.client, c.request_id) != (client, request_id)]
            self.counts["cancelled"] += len(calls) - len(kept)
            calls[:] = kept

    @staticmethod
    def _send(router, client: bytes, kind: str, request_id: int, payload) -> None:
        try:
            router.send_multipart([client, wire.encode(kind, request_id, payload)])
        except zmq.ZMQError as error:  # the asker is gone
            log.debug("could not answer request %s: %s", request_id, error)

    def _send_event(self, router, call: _Waiting, event) -> None:
        try:
            router.send_multipart([call.client, wire.encode_event(call.request_id, event)])
        except zmq.ZMQError as error:
            log.debug("could not answer request %s: %s", call.request_id, error)

    # -- embedding ----------------------------------------------------------------------

    def _embed_waiting(self, router) -> None:
        """Every waiting call's inputs checked, then embedded in shared forward passes."""
        self.running, self.waiting = self.waiting, []
        for call in list(self.running):
            try:
                call.inputs = self.embedder.inputs_of(call.call)
            except InputRejected as error:
                self.counts["rejected"] += 1
                param = "documents" if isinstance(call.call, RerankCall) else "input"
                rejected = wire.Rejected(error.message, param=param, code=error.code)
                self._send(router, call.client, "rejected", call.request_id, rejected)
                self.running.remove(call)
            except Exception as error:  # the tokenizer failed: the web side answers 500
                log.exception("tokenizing request %s failed", call.request_id)
                self.counts["failed"] += 1
                self._send_event(router, call, Failed(f"tokenizing failed: {error}"))
                self.running.remove(call)
        if not self.running:
            return
        batch = list(self.running)  # a cancel while the passes run drops one from running
        inputs = [tokens for call in batch for tokens in call.inputs]
        started = time.monotonic()
        try:
            vectors = self.embedder.vectors(inputs, between=lambda: self._read(router))
        except Exception as error:  # a bug or the model's failure: the web side answers 500
            log.exception("embedding %d inputs failed", len(inputs))
            failed = Failed(f"embedding failed: {error}")
            for call in self.running:
                self.counts["failed"] += 1
                self._send_event(router, call, failed)
            self.running = []
            return
        self.seconds += time.monotonic() - started
        offset = 0
        for call in batch:
            rows = vectors[offset : offset + len(call.inputs)]
            offset += len(call.inputs)
            if call not in self.running:
                continue  # cancelled while its forward passes ran
            self.counts["completed"] += 1
            self._send(router, call.client, *self._answer(call, rows))
        self.running = []

    def _answer(self, call: _Waiting, rows) -> tuple[str, int, Embedded | Reranked]:
        """The (kind, request id, payload) that answers `call` with its rows."""
        if isinstance(call.call, RerankCall):
            tokens = sum(len(pair.ids) for pair in call.inputs)
            reranked = Reranked(scores=[float(row[0]) for row in rows], total_tokens=tokens)
            return "reranked", call.request_id, reranked
        embedded = Embedded(
            vectors=self.embedder.finish(rows, call.call.dimensions),
            prompt_tokens=sum(len(tokens) for tokens in call.inputs),
        )
        return "embedded", call.request_id, embedded

    def report(self) -> wire.WorkerStatus:
        stats = self.embedder.stats
        padding = 1 - stats.tokens / stats.padded_tokens if stats.padded_tokens else 0.0
        return wire.WorkerStatus(
            model=self.model,
            pid=os.getpid(),
            in_flight=len(self.waiting) + len(self.running),
            active_bytes=mx.get_active_memory(),
            cache_bytes=mx.get_cache_memory(),
            peak_bytes=mx.get_peak_memory(),
            stats={
                "requests_completed": self.counts["completed"],
                "requests_failed": self.counts["failed"],
                "requests_cancelled": self.counts["cancelled"],
                "requests_rejected": self.counts["rejected"],
                "prompt_tokens": stats.tokens,
                "generated_tokens": 0,
                "embeddings": {
                    **asdict(self.spec),
                    "inputs": stats.inputs,
                    "forward_passes": stats.forward_passes,
                    "padded_tokens": stats.padded_tokens,
                    "padding_share": round(padding, 4),
                    "seconds": round(self.seconds, 3),
                    "batch_tokens": self.batch_tokens,
                },
                # What a generation worker reports and an embedding model has none of (as
                # a distributed rank reports them): /stats sums these over the models.
                "fast_path": {"dense_weight_bytes": 0, "quantized_weight_bytes": 0},
                "prompt_cache": {"enabled": False, "entries": 0, "bytes": 0},
                "kv_cache": {"bytes": 0},
                "context_length": self.embedder.model.context_length,
                "blas": asdict(blas_state()),
                "device": device_name(),
            },
        )
