"""Request ids: a client's `X-Request-Id` when sane, else one made here; on every answer
and in every log line written while the request is served.

`RequestIds` wraps the ASGI application. The id lives in a context variable, so every
log line of the request's task (and of the threads Django hands its sync code to, which
copy the context) carries it through `RequestIdFilter`. The model worker gets the id with
the generation (`GenerateCall.request_id`) and logs it with its own lines of that request.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
import uuid

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
# Printable, no spaces or quotes: it goes into headers and log lines as it came.
SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=@-]{0,127}")
ANTHROPIC_PATH = "/v1/messages"  # Anthropic's surface: `request-id`, its rate-limit headers
QUIET_PREFIXES = ("/static/", "/health")  # assets and probes: no access line each

log = logging.getLogger("mlxlab.access")


def request_id_from(raw: bytes | None) -> str:
    """The client's id when it is sane, else a new one (OpenAI's `req_` form)."""
    text = raw.decode("latin-1") if raw else ""
    return text if SANE.fullmatch(text) else f"req_{uuid.uuid4().hex}"


class RequestIdFilter(logging.Filter):
    """Gives every record `request_id` (empty outside a request) and `request`, the id as
    the plain format shows it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", ""):
            record.request_id = REQUEST_ID.get()
        record.request = f" [{record.request_id}]" if record.request_id else ""
        return True


class RequestIds:
    """ASGI middleware: the id for each HTTP request, its response headers, an access line."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        request_id = request_id_from(headers.get(b"x-request-id"))
        token = REQUEST_ID.set(request_id)
        answer = {"status": 0, "done": False}
        started = time.monotonic()

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  *id_headers(scope["path"], request_id)]}  # fmt: skip
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                answer["done"] = True
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if not scope["path"].startswith(QUIET_PREFIXES):
                _access_line(scope, answer, time.monotonic() - started)
            REQUEST_ID.reset(token)


def id_headers(path: str, request_id: str) -> list[tuple[bytes, bytes]]:
    value = request_id.encode("latin-1")
    headers = [(b"x-request-id", value)]
    if path.startswith(ANTHROPIC_PATH):
        headers.append((b"request-id", value))
    return headers


def _access_line(scope, answer: dict, seconds: float) -> None:
    # 499, as nginx writes it: the client left before the answer ended.
    status = answer["status"] if answer["done"] else 499
    log.info("%s %s %d %.3fs", scope["method"], scope["path"], status, seconds)
