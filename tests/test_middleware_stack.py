"""The middleware chain switches threads once per request, not once per middleware."""

from __future__ import annotations

import asyncio

import asgiref.sync
from django.core.handlers.asgi import ASGIHandler

from mlxlab.asgi_handler import SynchronousChainHandler


def switches_for_one_request(handler: ASGIHandler, monkeypatch) -> tuple[list[str], int]:
    """(what went through sync_to_async, the answer's status) for one GET through `handler`."""
    made = []
    original = asgiref.sync.SyncToAsync.__call__

    def counted(self, *args, **kwargs):
        made.append(self.func.__qualname__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(asgiref.sync.SyncToAsync, "__call__", counted)
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/login/", "raw_path": b"/login/", "root_path": "",
        "query_string": b"", "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    sent = []

    async def run() -> None:
        told = False

        async def receive() -> dict:
            nonlocal told
            if told:  # nothing more: the client stays (Django listens for a disconnect)
                await asyncio.Event().wait()
            told = True
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            sent.append(message)

        await handler(scope, receive, send)

    asyncio.run(run())
    monkeypatch.undo()
    return made, sent[0]["status"]


def test_one_switch_a_request_where_djangos_handler_makes_a_dozen(monkeypatch, db):
    ours, status = switches_for_one_request(SynchronousChainHandler(), monkeypatch)
    theirs, their_status = switches_for_one_request(ASGIHandler(), monkeypatch)
    assert status == their_status == 200  # the login page, through every middleware
    # Both: the request_started signal's receivers and the response's close. Ours: the
    # chain once; Django's: each middleware hook, the view and the render apart.
    assert ours == [theirs[0], "BaseHandler.get_response", theirs[-1]]
    assert len([name for name in theirs if "Middleware." in name]) >= 12
