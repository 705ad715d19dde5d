"""The websocket Origin check compares scheme, host and port, not the host alone."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator

from mlxlab.origin import SameOriginValidator

# Channels' WebsocketDenier is a consumer, and consumers close stale database connections.
pytestmark = pytest.mark.django_db


async def accepting(scope, receive, send) -> None:
    """A bare ASGI websocket app that accepts (a consumer would touch the database)."""
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


async def _opens(origin: str | None, host: str = "127.0.0.1:8000", scheme: str = "ws") -> bool:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    socket = WebsocketCommunicator(SameOriginValidator(accepting), "/ws/chat/", headers=headers)
    socket.scope["scheme"] = scheme
    accepted, _ = await socket.connect()
    await socket.disconnect()
    return accepted


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "opens"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws", True),
        ("http://localhost", "localhost:80", "ws", True),  # the default port, either way
        ("https://lab.example", "lab.example", "wss", True),
        ("http://127.0.0.1:9000", "127.0.0.1:8000", "ws", False),  # another port: another site
        ("http://localhost:3000", "localhost:8000", "ws", False),
        ("https://127.0.0.1:8000", "127.0.0.1:8000", "ws", False),  # another scheme
        ("http://evil.example:8000", "127.0.0.1:8000", "ws", False),
        ("null", "127.0.0.1:8000", "ws", False),
        (None, "127.0.0.1:8000", "ws", False),
    ],
)
def test_only_the_servers_own_origin_opens_a_socket(origin, host, scheme, opens):
    assert asyncio.run(_opens(origin, host, scheme)) is opens


def test_a_trusted_origin_opens_a_socket(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["http://127.0.0.1:9000"]
    assert asyncio.run(_opens("http://127.0.0.1:9000"))
