"""What the supervisor keeps of each model worker and of each model's replicas, and its
settings."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import zmq.asyncio

from ..protocol import wire
from ..protocol.adapters import AdapterRef
from .routing import Router
from .streams import EngineUnavailable, ExitStatus, RequestStream

FINAL_KINDS = ("finished", "failed", "rejected", "embedded", "reranked")


@dataclass(frozen=True)
class SupervisorConfig:
    command: Callable[[str, str, str], list[str]]  # (model, path, address) -> argv
    socket_dir: Path
    # A draft model's companion worker's argv (companions.py); None: drafts run inline.
    companion_command: Callable[[str, str, str], list[str]] | None = None
    max_loaded: int = 2
    memory_limit_bytes: int = 0  # 0: no memory bound
    idle_seconds: float = 1800.0  # 0: never unload idle models
    wait_seconds: float = 30.0  # for a restarting worker
    load_seconds: float = 600.0
    pinned: frozenset[str] = frozenset()
    report_interval: float = 2.0
    max_start_failures: int = 3  # in a row, while loading: the model cannot load
    # Workers started elsewhere (model -> its addresses): connected to, never spawned.
    remote: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    # Local worker processes per model (MLXLAB_MODEL_REPLICAS); 1 where unnamed, 0 for a
    # model named in `remote` alone.
    replicas: Mapping[str, int] = field(default_factory=dict)
    imbalance: int = 8  # requests past the least loaded replica that end an affinity (routing.py)
    round_robin: bool = False  # replicas in turn, affinity ignored (to measure against)
    secret: str = ""  # the link's shared secret (link.py); "" on loopback only
    link_timeout: float = 6.0  # a TCP link silent this long is lost

    def addresses(self, model: str) -> tuple[str, ...]:
        """The model's remote workers' addresses."""
        named = self.remote.get(model, ())
        return (named,) if isinstance(named, str) else tuple(named)

    def local_replicas(self, model: str) -> int:
        """How many worker processes of the model this process spawns."""
        return self.replicas.get(model, 0 if self.addresses(model) else 1)


@dataclass
class Worker:
    """One replica of a model: the process of the moment and what survives its restarts."""

    id: str
    model: str
    path: str
    address: str
    estimate_bytes: int
    replica: int = 0  # its place among the model's replicas (the metrics' `replica` label)
    group: Replicas | None = None
    # "primary" serves its model; a "companion" runs a draft model for `primary` (its id).
    role: str = "primary"
    primary: str | None = None
    # Out of rotation by an operator's drain: it finishes its streams, takes no new ones.
    drained: bool = False
    state: str = "starting"
    restarts: int = 0
    pid: int | None = None
    last_exit: ExitStatus | None = None
    status: wire.WorkerStatus | None = None
    draining: bool = False
    waiters: int = 0  # requests waiting for this worker to be ready
    last_used: float = field(default_factory=time.monotonic)
    start_failures: int = 0
    failure: str | None = None  # why it stopped for good
    process: subprocess.Popen | None = None
    socket: zmq.asyncio.Socket | None = None
    streams: dict[int, RequestStream] = field(default_factory=dict)
    # Streams whose client left, until the worker's tally of what they cost comes back
    # (or LEFT_SECONDS pass: one cancelled before it ran has none).
    leaving: dict[int, tuple[float, RequestStream]] = field(default_factory=dict)
    reports: dict[int, asyncio.Future] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task | None = None
    # A worker on another host: no process here, a link watched through its monitor.
    remote: bool = False
    watcher: asyncio.Task | None = None
    link_error: str | None = None  # the link is refused (another secret): said at once
    adapters: list[str] = field(default_factory=list)  # mounted here, as it last said

    @property
    def socket_path(self) -> str | None:
        return self.address.removeprefix("ipc://") if self.address.startswith("ipc://") else None

    @property
    def memory_bytes(self) -> int:
        if self.status is None:
            return self.estimate_bytes
        return self.status.active_bytes + self.status.cache_bytes

    def unready_reason(self) -> str:
        """Why a request waited for this worker in vain."""
        if self.remote:
            if self.link_error:
                return self.link_error
            if self.restarts > 0:
                return (
                    f"the link to the worker for {self.model} at {self.address} is lost; "
                    "waiting for it to answer again"
                )
            return f"the worker for {self.model} at {self.address} does not answer"
        if self.state == "restarting" or self.restarts > 0:
            reason = f"the worker for {self.model} is restarting"
            if self.last_exit is not None:
                reason += f" after it stopped ({self.last_exit.describe()})"
            return reason
        return f"the worker for {self.model} is still loading the model"

    @property
    def public_state(self) -> str:
        """Its state as reports show it: a ready replica being drained (alone, or with its
        whole model) is `draining`."""
        drained = self.drained or (self.group is not None and self.group.draining)
        return "draining" if drained and self.state == "ready" else self.state

    @property
    def serving(self) -> bool:
        """Whether it takes new requests."""
        return self.state == "ready" and not self.drained

    def notify(self) -> None:
        """Wake whoever waits for a change of state (this replica's or its model's)."""
        self.changed.set()
        self.changed = asyncio.Event()
        if self.group is not None:
            self.group.notify()


@dataclass
class Replicas:
    """One resident model: its replicas (local processes, then remote addresses), and what
    a request waiting for any of them needs."""

    model: str
    path: str
    router: Router
    workers: list[Worker] = field(default_factory=list)
    draining: bool = False  # the whole model: evicted, reloaded or unloaded
    stopped: bool = False
    waiters: int = 0  # requests waiting for a replica to be ready
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # An operator's mounts (adapter_mounts.py): each replica loads them, restarts included.
    mounted: dict[str, AdapterRef] = field(default_factory=dict)
    # Draft models' companion workers, by (their primary's id, the draft's folder).
    companions: dict[tuple[str, str], Worker] = field(default_factory=dict)

    @property
    def last_used(self) -> float:
        return max((w.last_used for w in self.workers), default=0.0)

    @property
    def local(self) -> list[Worker]:
        return [w for w in self.workers if not w.remote]

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.state != "stopped"]

    def serving(self) -> list[Worker]:
        return [w for w in self.workers if w.serving]

    def holds_requests(self) -> bool:
        return self.waiters > 0 or any(w.streams for w in self.workers)

    def refuse_if_hopeless(self) -> None:
        """Every replica failed to load, or refused the link: said at once, not waited for."""
        if not self.workers:
            reason = f"no worker serves {self.model}: MLXLAB_MODEL_REPLICAS gives it none"
            raise EngineUnavailable(f"{reason}, and MLXLAB_WORKERS names no address", "stopped")
        live = self.live()
        if not live:
            failed = next((w for w in self.workers if w.failure), self.workers[0])
            raise EngineUnavailable(failed.failure or failed.unready_reason(), "stopped")
        if all(w.link_error for w in live):
            raise EngineUnavailable(live[0].link_error, live[0].state)

    def patience(self, wait_seconds: float, load_seconds: float) -> float:
        """How long a request waits for a replica: a first load may take long; a restart,
        or a remote worker (it loaded on its host), is a short wait."""
        live = self.live()
        recovering = any(w.restarts > 0 and w.state in ("restarting", "starting") for w in live)
        short = recovering or any(w.remote for w in live)
        return wait_seconds if short else load_seconds

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


def exit_status(returncode: int) -> ExitStatus:
    if returncode < 0:
        try:
            return ExitStatus(None, signal.Signals(-returncode).name)
        except ValueError:
            return ExitStatus(None, f"signal {-returncode}")
    return ExitStatus(returncode, None)
