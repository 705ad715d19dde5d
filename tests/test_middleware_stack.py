"""The middleware chain switches threads once per request, not once per middleware, on
kept threads whose database connections stay open."""

from __future__ import annotations

import asyncio
import threading

import asgiref.sync
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_started
from django.db import connection

from mlxlab.asgi_handler import KeptThreads, SynchronousChainHandler


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


def connections_of_two_requests(
    handler: ASGIHandler, monkeypatch
) -> list[tuple[threading.Thread, object]]:
    """(thread, database connection) each of two GETs through `handler` ran its chain on."""
    seen = []

    def note(**kwargs) -> None:  # after Django's close_old_connections, on the chain's thread
        connection.ensure_connection()
        seen.append((threading.current_thread(), connection.connection))

    request_started.connect(note)
    try:
        for _ in range(2):
            switches_for_one_request(handler, monkeypatch)
    finally:
        request_started.disconnect(note)
    return seen


def test_a_request_borrows_a_kept_thread_and_its_open_connection(monkeypatch, db):
    (thread, opened), (again, reused) = connections_of_two_requests(
        SynchronousChainHandler(), monkeypatch
    )
    assert again is thread and reused is opened
    # Django's own handler: a new thread a request, so a new connection.
    (thread, opened), (again, reused) = connections_of_two_requests(ASGIHandler(), monkeypatch)
    assert again is not thread and reused is not opened


def test_a_thread_left_busy_by_its_request_is_not_lent_again():
    threads = KeptThreads(keep=2)
    first = threads.take()
    threads.give_back(first)
    assert threads.take() is first  # idle: kept
    release = threading.Event()
    first.submit(release.wait)  # a chain still running after its request was cut short
    threads.give_back(first)
    other = threads.take()
    assert other is not first
    release.set()
    first.shutdown(wait=True)  # it ends once its work is done
    threads.give_back(other)
    assert threads.take() is other
