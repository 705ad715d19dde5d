"""What the supervisor keeps of each model worker, and its settings."""

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
from .streams import ExitStatus, RequestStream

FINAL_KINDS = ("finished", "failed", "rejected", "embedded", "reranked")


@dataclass(frozen=True)
class SupervisorConfig:
    command: Callable[[str, str, str], list[str]]  # (model, path, address) -> argv
    socket_dir: Path
    max_loaded: int = 2
    memory_limit_bytes: int = 0  # 0: no memory bound
    idle_seconds: float = 1800.0  # 0: never unload idle models
    wait_seconds: float = 30.0  # for a restarting worker
    load_seconds: float = 600.0
    pinned: frozenset[str] = frozenset()
    report_interval: float = 2.0
    max_start_failures: int = 3  # in a row, while loading: the model cannot load
    # Workers started elsewhere (model -> address): connected to, never spawned.
    remote: Mapping[str, str] = field(default_factory=dict)
    secret: str = ""  # the link's shared secret (link.py); "" on loopback only
    link_timeout: float = 6.0  # a TCP link silent this long is lost


@dataclass
class Worker:
    """One model's worker: the process of the moment and what survives its restarts."""

    id: str
    model: str
    path: str
    address: str
    estimate_bytes: int
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

    def notify(self) -> None:
        """Wake whoever waits for a change of state, then re-arm."""
        self.changed.set()
        self.changed = asyncio.Event()


def exit_status(returncode: int) -> ExitStatus:
    if returncode < 0:
        try:
            return ExitStatus(None, signal.Signals(-returncode).name)
        except ValueError:
            return ExitStatus(None, f"signal {-returncode}")
    return ExitStatus(returncode, None)
