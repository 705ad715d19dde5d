"""One model across hosts: a model worker that is an `mx.distributed` group.

Every rank runs `manage.py modelworker --distributed` (`mlx.launch --backend ring`, or
MLX_RANK and MLX_HOSTFILE set by hand) and holds a tensor-parallel shard of the model
(mlx-lm's `sharded_load`, the model's own `shard()`; heads the ranks do not divide are
padded with zero heads first, head_padding.py). Rank 0 alone speaks the worker
protocol (wire.py) at `--listen`, so the web tier sees one worker; for each request it
shares the prompt and the sampling settings with the other ranks (all_sum over the ring),
and before every token whether to go on, so that all ranks run the same forward passes in
lockstep. Requests are served one at a time; structured output, adapters, logprobs and
stop strings are refused (a single-host worker has them).

A group that loses a rank cannot go on: the ranks left are out of lockstep, and the ring
has no way to take a rank back. So every rank exits as soon as another is lost (its
lifeline closes, lifeline.py, or a collective fails), which drops rank 0's link: the web
tier ends the requests it held as for a dead worker, and each rank's service manager
(systemd's Restart=always) starts it again; the new ranks wait for each other in
`mx.distributed.init`, and the group serves again.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import mlx.core as mx
import zmq
from mlx_lm.generate import generate_step, generation_stream
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import sharded_load

from ...protocol import link, wire
from ...protocol.events import Finished, TextDelta
from ..acceleration.head_padding import shardable_path
from .lifeline import Lifelines, leave_the_group, lifeline_address

log = logging.getLogger(__name__)

STOP = -1  # a plan's length that tells the other ranks to exit


def _exit(signum, frame) -> None:
    raise SystemExit(0)


def _hosts() -> list[list[str]]:
    """MLX_HOSTFILE's ranks: a list of ["ip:port", ...] per rank, rank 0 first."""
    hostfile = os.environ.get("MLX_HOSTFILE", "")
    return json.loads(Path(hostfile).read_text()) if hostfile else []


def _join_group(hosts: list[list[str]]) -> mx.distributed.Group:
    """The ring of `hosts`. A hostfile of one host is a group of one (MLX's ring wants two
    or more): the same worker without the ring, which bench/distributed.py measures the
    ring's cost against."""
    if len(hosts) == 1:
        del os.environ["MLX_HOSTFILE"]  # MLX reads it from the process environment
        return mx.distributed.init(backend="ring", strict=False)
    return mx.distributed.init(backend="ring", strict=True)


class DistributedWorker:
    def __init__(self, *, model: str, path: str, address: str, secret: str = "",
                 link_timeout: float = 6.0, padded_dir: Path | None = None) -> None:  # fmt: skip
        """`padded_dir`: where a copy with zero heads goes when the ranks do not divide the
        model's heads (head_padding.py); beside the model folder when not given."""
        hosts = _hosts()
        rank0_host = hosts[0][0].rsplit(":", 1)[0] if hosts else "127.0.0.1"
        self.lifelines = Lifelines(
            rank=int(os.environ.get("MLX_RANK", "0")), size=max(len(hosts), 1),
            address=lifeline_address(address, rank0_host), timeout=link_timeout,
        )  # fmt: skip
        self.group = _join_group(hosts)
        self.rank = self.group.rank()
        self.name, self.address = model, address
        self.secret, self.link_timeout = secret, link_timeout
        folder = Path(path)
        folder = shardable_path(folder, self.group.size(), padded_dir or folder.parent)
        self.model, self.tokenizer = sharded_load(str(folder), tensor_group=self.group)
        self.lifelines.hold()
        self.generated = self.completed = self.cancelled = 0
        self.in_flight = 0
        self.pending: list[tuple[bytes, int, wire.GenerateCall]] = []  # rank 0's queue

    # -- what every rank shares ---------------------------------------------------------

    def _share(self, values: list[float] | None, size: int, dtype=mx.float32) -> list:
        """Rank 0's `values` on every rank (the others contribute zeros)."""
        mine = mx.array(values, dtype=dtype) if self.rank == 0 else mx.zeros(size, dtype=dtype)
        # On the generation's own stream: every rank then orders these collectives after
        # the forward pass generate_step has already set going, the same way on each.
        shared = mx.distributed.all_sum(mine, group=self.group, stream=generation_stream)
        return shared.tolist()

    def _share_plan(self, plan: tuple | None) -> tuple | None:
        """The next request: (prompt tokens, max tokens, sampling) from rank 0, whose None
        tells the others to exit; the others pass anything."""
        if self.rank != 0:
            head = None
        elif plan is None:
            head = [STOP, 0, 0, 0, 0, 0, 0]
        else:
            tokens, max_tokens, s = plan
            head = [len(tokens), max_tokens, s.temperature, s.top_p, s.top_k, s.min_p,
                    s.seed or 0]  # fmt: skip
        length, max_tokens, temperature, top_p, top_k, min_p, seed = self._share(head, 7)
        if int(length) == STOP:
            self.lifelines.stopping = True
            return None
        tokens = plan[0] if self.rank == 0 else None
        tokens = self._share(tokens, int(length), mx.int32)
        mx.random.seed(int(seed))
        sampler = make_sampler(temp=temperature, top_p=top_p, min_p=min_p, top_k=int(top_k))
        return tokens, int(max_tokens), sampler

    def _go_on(self, flag: bool) -> bool:
        return bool(self._share([1.0 if flag else 0.0] if self.rank == 0 else None, 1)[0])

    def _run(self, tokens: list[int], max_tokens: int, sampler, wants_more) -> None:
        """The generation on every rank; rank 0's `wants_more(token)` steers them all."""
        steps = generate_step(mx.array(tokens), self.model, max_tokens=max_tokens, sampler=sampler)
        token = None
        while self._go_on(wants_more(token) if self.rank == 0 else False):
            token, _ = next(steps)
            token = int(token)
        steps.close()
        # generate_step set the next forward pass going before it yielded: every rank lets
        # it finish before the next plan's collectives, or the ring's order breaks.
        mx.synchronize(generation_stream)

    # -- the other ranks ----------------------------------------------------------------

    def follow(self) -> None:
        try:
            while (plan := self._share_plan(())) is not None:
                self._run(*plan, None)
        except Exception as error:  # noqa: BLE001 - a collective failed: the ring is broken
            leave_the_group(self.rank, f"{type(error).__name__}: {error}")

    # -- rank 0 ---------------------------------------------------------------------------

    def serve_forever(self) -> None:
        if self.rank != 0:
            self.follow()
            return
        signal.signal(signal.SIGTERM, _exit)
        context = zmq.Context()
        router, authenticator = link.serving_router(
            context, self.address, self.secret, self.link_timeout
        )
        log.info("worker for %s serving at %s (pid %d, rank 0 of %d)",
                 self.name, self.address, os.getpid(), self.group.size())  # fmt: skip
        try:
            while True:
                if self.pending:
                    self._generate(router, *self.pending.pop(0))
                elif router.poll(500):
                    client, frame = router.recv_multipart()
                    self._receive(router, client, frame)
        except SystemExit:
            pass
        finally:
            self.lifelines.stopping = True
            self._share_plan(None)  # the other ranks exit too
            router.close(0)
            if authenticator is not None:
                authenticator.stop()
            context.term()

    def _receive(self, router, client: bytes, frame: bytes) -> None:
        try:
            kind, request_id, call = wire.decode(frame)
        except wire.WireError as error:
            log.warning("dropped a malformed frame: %s", error)
            return
        if kind == "report":
            router.send_multipart([client, wire.encode("status", request_id, self.report())])
        elif kind == "generate":
            self.pending.append((client, request_id, call))
        elif kind == "cancel":
            self.pending = [p for p in self.pending if p[:2] != (client, request_id)]

    def _prompt(self, call: wire.GenerateCall) -> list[int]:
        unsupported = [name for name, used in (
            ("structured output", call.chat is not None and call.chat.structured is not None),
            ("adapters", bool(call.adapters)), ("logprobs", call.logprobs), ("stop", bool(call.stop)),
        ) if used]  # fmt: skip
        if unsupported:
            raise ValueError(f"a distributed worker does not serve {', '.join(unsupported)}")
        if call.chat is None:
            return self.tokenizer.encode(call.text or "")
        return self.tokenizer.apply_chat_template(
            call.chat.messages, tools=call.chat.tools or None, add_generation_prompt=True,
            **call.chat.template_kwargs,
        )  # fmt: skip

    def _generate(self, router, client: bytes, request_id: int, call) -> None:
        def send(kind_or_event, payload=None) -> None:
            if payload is None:
                frame = wire.encode_event(request_id, kind_or_event)
            else:
                frame = wire.encode(kind_or_event, request_id, payload)
            router.send_multipart([client, frame])

        try:
            tokens = self._prompt(call)
        except Exception as error:
            send("rejected", wire.Rejected(str(error)))
            return
        send("accepted", wire.Accepted(len(tokens)))
        if call.count_only:
            return
        max_tokens = call.max_tokens or call.default_max_tokens
        detokenizer = self.tokenizer.detokenizer
        detokenizer.reset()
        state = {"count": 0, "reason": "length", "cancelled": False}

        def wants_more(token: int | None) -> bool:
            if token is not None:
                if token in self.tokenizer.eos_token_ids:
                    state["reason"] = "stop"
                    return False
                state["count"] += 1
                detokenizer.add_token(token)
                if segment := detokenizer.last_segment:  # reading it takes it
                    send(TextDelta(segment))
            if self._cancelled(router, client, request_id):
                state["cancelled"] = True
                return False
            return state["count"] < max_tokens

        self.in_flight = 1
        try:
            self._run(*self._share_plan((tokens, max_tokens, call.sampling)), wants_more)
        except Exception as error:  # noqa: BLE001 - the ranks are out of lockstep now
            # Not a Failed frame: the web tier tells its clients what a worker's death is.
            leave_the_group(0, f"{type(error).__name__}: {error}")
        finally:
            self.in_flight = 0
        detokenizer.finalize()
        if segment := detokenizer.last_segment:
            send(TextDelta(segment))
        self.generated += state["count"]
        self.cancelled += state["cancelled"]
        self.completed += not state["cancelled"]
        send(Finished(state["reason"], len(tokens), state["count"]))

    def _cancelled(self, router, current: bytes, request_id: int) -> bool:
        """A cancel for this request among the frames that came meanwhile (reports answered)."""
        cancelled = False
        while router.poll(0):
            client, frame = router.recv_multipart()
            try:
                kind, rid, _ = wire.decode(frame)
            except wire.WireError:
                continue
            if kind == "report":
                router.send_multipart([client, wire.encode("status", rid, self.report())])
            elif kind == "cancel" and (client, rid) == (current, request_id):
                cancelled = True
            else:  # generate (queued: one at a time) or a cancel of a queued one
                self._receive(router, client, frame)
        return cancelled

    def report(self) -> wire.WorkerStatus:
        return wire.WorkerStatus(
            model=self.name, pid=os.getpid(), in_flight=self.in_flight,
            active_bytes=mx.get_active_memory(), cache_bytes=mx.get_cache_memory(),
            peak_bytes=mx.get_peak_memory(),
            stats={
                "requests_completed": self.completed, "requests_failed": 0,
                "requests_cancelled": self.cancelled, "prompt_tokens": 0,
                "generated_tokens": self.generated, "decode_tokens_per_second": 0.0,
                "fast_path": {"dense_weight_bytes": 0, "quantized_weight_bytes": 0},
                "prompt_cache": {"bytes": 0}, "kv_cache": {"bytes": 0}, "blas": None,
                "distributed": {"backend": "ring", "ranks": self.group.size()},
            },
        )  # fmt: skip
