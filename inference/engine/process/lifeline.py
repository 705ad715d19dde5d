"""The ranks of a distributed worker hold each other's lifelines: one rank lost, all exit.

MLX's ring does not always tell a collective that a peer is gone: with mlx 0.32, a rank
whose peer was SIGKILLed mid-generation logged "[ring] Too many send/recv errors" and then
waited forever in an all_sum on the generation stream. So the ranks watch each other
apart from the ring, over plain TCP: every other rank keeps one connection to rank 0, and
a thread on each end sends a byte every third of the link timeout and reads the other's.
A closed connection (the peer died: its kernel closed its sockets) or silence past the
timeout (its host dropped off the network) ends this rank at once. Rank 0 exiting closes
every other rank's connection in turn, so one lost rank takes the whole group down, and
rank 0's worker socket with it, which is what the web tier sees. MLX releases the GIL
while it waits, so these threads run even when the main thread is stuck in a collective.

Rank 0 listens at its host in the hostfile (where the others reach it for the ring), on
the port after the worker's own (`--listen` tcp://HOST:PORT: PORT + 1); with an ipc://
worker address (all ranks on one host), at that socket's path + ".lifeline".
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

RANK_LOST = 3  # the exit status of a rank whose group lost another rank
CONNECT_SECONDS = 300.0  # how long a rank waits for rank 0 to hold its lifeline


def leave_the_group(rank: int, why: str) -> None:
    """Exit at once: the group lost a rank (or fell out of lockstep) and cannot recover.

    os._exit, not SystemExit: MLX's threads may be stuck on the dead peer's sockets, and an
    orderly interpreter exit would wait on them.
    """
    log.error("rank %d leaves its group: %s", rank, why)
    logging.shutdown()
    os._exit(RANK_LOST)


def lifeline_address(worker_address: str, rank0_host: str) -> tuple[int, object]:
    """(socket family, address) where rank 0 holds the lifelines."""
    if worker_address.startswith("ipc://"):
        return socket.AF_UNIX, worker_address.removeprefix("ipc://") + ".lifeline"
    port = int(worker_address.rsplit(":", 1)[1]) + 1
    return socket.getaddrinfo(rank0_host, port, type=socket.SOCK_STREAM)[0][0], (rank0_host, port)


class Lifelines:
    """This rank's lifelines: to every other rank (rank 0), or to rank 0 (the others)."""

    def __init__(self, *, rank: int, size: int, address: tuple[int, object], timeout: float):
        self.rank, self.size, self.timeout = rank, size, timeout
        self.family, self.address = address
        self.stopping = False  # an orderly stop: a closed lifeline is expected then
        self.listener: socket.socket | None = None
        if rank == 0 and size > 1:  # bound before the ring forms: the others may come first
            self.listener = socket.socket(self.family, socket.SOCK_STREAM)
            if self.family == socket.AF_UNIX:
                Path(self.address).unlink(missing_ok=True)
            else:
                self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(self.address)
            self.listener.listen(size)

    def hold(self) -> None:
        """Connect every lifeline and start watching them; returns once all are held."""
        if self.size == 1:
            return
        if self.rank == 0:
            self.listener.settimeout(CONNECT_SECONDS)
            try:
                connections = [self.listener.accept()[0] for _ in range(self.size - 1)]
            except TimeoutError:
                leave_the_group(0, "a rank joined the ring but never held its lifeline")
            self.listener.close()
        else:
            connections = [self._connect()]
        for connection in connections:
            threading.Thread(target=self._watch, args=(connection,), daemon=True,
                             name="lifeline").start()  # fmt: skip

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            try:
                if self.family == socket.AF_UNIX:
                    return _unix_connection(self.address)
                return socket.create_connection(self.address, timeout=5)
            except OSError as error:
                if time.monotonic() > deadline:
                    leave_the_group(self.rank, f"rank 0's lifeline does not answer: {error}")
                time.sleep(0.2)

    def _watch(self, connection: socket.socket) -> None:
        interval = self.timeout / 3
        heard = next_beat = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= next_beat:
                    connection.sendall(b".")
                    next_beat = now + interval
                connection.settimeout(max(next_beat - now, 0.01))
                try:
                    if not connection.recv(64):
                        return self._lost("another rank closed its lifeline (it exited)")
                    heard = time.monotonic()
                except TimeoutError:
                    if time.monotonic() - heard > self.timeout:
                        return self._lost(f"another rank was silent for {self.timeout:.0f} s")
        except OSError as error:
            self._lost(f"another rank's lifeline broke: {error}")

    def _lost(self, why: str) -> None:
        if not self.stopping:
            leave_the_group(self.rank, why)


def _unix_connection(path: str) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    return connection
