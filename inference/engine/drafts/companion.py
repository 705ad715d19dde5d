"""Drafts from a companion worker: the draft model runs in a process of its own beside
its target's (process/companion.py), and the target's engine asks it for each drafted
row's next tokens over a local ZeroMQ link.

The companion keeps each row's draft-model KV cache, as ModelDrafter does inline; each
question carries only what changed since the row's last one (how many held tokens stay,
and the new tail), so a step sends a few tokens, not the history.

A companion that is down, or late past the timeout, means no drafts: the row goes on
undrafted for the rest of its request (its output is the target's own either way), and a
companion that restarts serves the next requests. Everything here runs on the engine
thread, the only one that touches these sockets.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time

import zmq

from ...protocol import wire
from .draft_model import DEFAULT_MODEL_DRAFT_TOKENS
from .drafting import common_prefix

log = logging.getLogger(__name__)

# A row's first question prefills its whole prompt in the draft model: it may take long.
FIRST_TIMEOUT = 30.0
# Later ones decode a few tokens of a small model; waiting longer would cost more than
# the drafts save, and a companion this late is taken for gone.
STEP_TIMEOUT = 2.0
# How long a question waits for a link to the companion (a new socket connects, a
# restarted companion is reconnected to); none by then: no drafts.
CONNECT_TIMEOUT = 0.2


class CompanionLinks:
    """This worker's links to its companions: one DEALER socket per address."""

    def __init__(self) -> None:
        self._context: zmq.Context | None = None
        self._sockets: dict[str, zmq.Socket] = {}
        self._ids = itertools.count(1)

    def _socket(self, address: str) -> zmq.Socket:
        socket = self._sockets.get(address)
        if socket is None:
            if self._context is None:
                self._context = zmq.Context()
            socket = self._context.socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            # No link, no queueing: a question to a dead companion fails at once, rather
            # than wait in a queue for its successor (which never heard of the row).
            socket.setsockopt(zmq.IMMEDIATE, 1)
            socket.connect(address)
            self._sockets[address] = socket
        return socket

    def ask(self, address: str, call: wire.DraftCall, timeout: float) -> list[int] | None:
        """The companion's drafts for `call`, or None when it cannot answer in time."""
        socket = self._socket(address)
        request_id = next(self._ids)
        if not socket.poll(CONNECT_TIMEOUT * 1000, zmq.POLLOUT):
            return None
        try:
            socket.send(wire.encode("draft", request_id, call), zmq.NOBLOCK)
        except zmq.Again:
            return None
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not socket.poll(left * 1000):
                return None
            try:
                kind, answered, payload = wire.decode(socket.recv())
            except wire.WireError:
                continue
            if kind == "drafts" and answered == request_id:  # else a late answer
                return payload.tokens
        return None

    def release(self, address: str, row: int) -> None:
        """The row is done: the companion frees its cache (lost with a dead companion)."""
        with contextlib.suppress(zmq.Again):
            self._socket(address).send(wire.encode("release", row), zmq.NOBLOCK)


_rows = itertools.count(1)  # row ids, unique in this process (the companion keys by link)


class CompanionDrafter:
    """One row's drafts from a companion worker; the same interface as ModelDrafter."""

    def __init__(self, links: CompanionLinks, address: str, limit: int | None = None) -> None:
        self.links, self.address = links, address
        self.limit = limit or DEFAULT_MODEL_DRAFT_TOKENS
        self.row = next(_rows)
        self.sent: list[int] = []  # the history the companion holds for this row
        self.off = False  # the companion failed this row once: no more drafts for it
        self.proposed = 0
        self.accepted = 0

    def propose(self, history: list[int], limit: int) -> list[int]:
        """The companion's greedy continuation of `history`, up to `limit` tokens; [] once
        it has failed to answer."""
        limit = min(limit, self.limit)
        if limit <= 0 or self.off:
            return []
        keep = common_prefix(self.sent, history)
        call = wire.DraftCall(self.row, keep, history[keep:], limit)
        timeout = STEP_TIMEOUT if self.sent else FIRST_TIMEOUT
        tokens = self.links.ask(self.address, call, timeout)
        if tokens is None:
            log.warning("the draft companion at %s did not answer: drafting off", self.address)
            self.off = True
            return []
        self.sent = list(history)
        return tokens[:limit]

    def observe(self, proposed: int, accepted: int) -> None:
        self.proposed += proposed
        self.accepted += accepted

    def close(self) -> None:
        if self.sent:
            self.links.release(self.address, self.row)

    @property
    def rejected(self) -> int:
        return self.proposed - self.accepted
