"""The link between the web tier and a model worker on another host: ZeroMQ's CURVE.

A worker that listens on TCP beyond loopback serves only peers that hold the lab's
shared secret (MLXLAB_WORKER_SECRET). Both CURVE key pairs, the worker's and the web
tier's, are derived from that secret (HMAC-SHA256 under a label of each role), so one
secret is all an operator hands out, and nothing of it crosses the wire: CURVE (RFC 26,
libsodium's box under ZeroMQ) authenticates both ends and encrypts every frame, and the
worker's ZAP handler admits only the web tier's derived public key. A peer without the
secret never completes the handshake, so no frame of it reaches the worker's protocol.

Liveness is ZMTP's own heartbeat (PING/PONG): a peer silent for the link timeout is
disconnected, which the web side sees on its socket monitor as a lost link.

Nothing here needs Django's settings.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass

import zmq
import zmq.auth.thread
from zmq.utils import z85

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyPair:
    public: bytes  # Z85, 40 characters
    secret: bytes


def derived_keys(secret: str, role: str) -> KeyPair:
    """The CURVE key pair of `role` ("worker" or "web") under the shared secret."""
    raw = hmac.new(secret.encode(), f"mlxlab model worker link: {role}".encode(), hashlib.sha256)
    secret_key = z85.encode(raw.digest())
    return KeyPair(zmq.curve_public(secret_key), secret_key)


def heartbeat(socket: zmq.Socket, timeout_seconds: float) -> None:
    """ZMTP heartbeats: a PING every third of the timeout; silence past it drops the link."""
    timeout_ms = max(int(timeout_seconds * 1000), 300)
    socket.setsockopt(zmq.HEARTBEAT_IVL, max(timeout_ms // 3, 100))
    socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
    socket.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)


def secure_client(socket: zmq.Socket, secret: str) -> None:
    """The web side of an authenticated link (before connect)."""
    web, worker = derived_keys(secret, "web"), derived_keys(secret, "worker")
    socket.curve_secretkey = web.secret
    socket.curve_publickey = web.public
    socket.curve_serverkey = worker.public


class _OnlyTheLab:
    """The ZAP handler's verdict: the web tier's derived key, and no other."""

    def __init__(self, allowed: bytes) -> None:
        self.allowed = allowed

    def callback(self, domain: str, key: bytes) -> bool:
        if hmac.compare_digest(key, self.allowed):
            return True
        log.warning("refused a link with an unknown CURVE key (another secret)")
        return False


def secure_server(context: zmq.Context, socket: zmq.Socket, secret: str):
    """The worker's side (before bind); returns the authenticator, to stop at exit."""
    authenticator = zmq.auth.thread.ThreadAuthenticator(context, log=log)
    authenticator.start()
    authenticator.configure_curve_callback(
        "*", credentials_provider=_OnlyTheLab(derived_keys(secret, "web").public)
    )
    socket.curve_server = True
    socket.curve_secretkey = derived_keys(secret, "worker").secret
    return authenticator


def serving_router(
    context: zmq.Context,
    address: str,
    secret: str | None,
    link_timeout: float,
    options: tuple[tuple[int, int], ...] = (),
):
    """A worker's ROUTER socket bound at `address`: no linger, `options` (socket options)
    set, the link authenticated where there is a secret, heartbeats over TCP. Returns it and
    the authenticator to stop at exit (None without a secret)."""
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    for option, value in options:
        router.setsockopt(option, value)
    authenticator = secure_server(context, router, secret) if secret else None
    if address.startswith("tcp://"):
        heartbeat(router, link_timeout)
    router.bind(address)
    return router, authenticator


HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
