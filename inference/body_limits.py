"""Request body size limits for every endpoint: a 413 in the endpoint's own error shape.

Limits follow the path Django routes on (`path_info`): a client-sent root path
(Daphne-Root-Path) must not move a body under another prefix's limit.

Three layers. The HTTP server (mlxlab/http_limits.py, under `make run` and the tests)
checks first, as the bytes arrive: a declared Content-Length over the limit is answered
413 once the headers are in, before any of the body is read, and the connection closed;
a chunked body is cut off with its 413 as soon as the bytes received pass the limit,
nothing past it spooled; a body that does not arrive within MLXLAB_REQUEST_BODY_SECONDS
is a 408. `BodyLimitGuard` wraps the ASGI application and checks again, for a server
that hands the app a body as it streams in (under Daphne it only sees what was let
through). `BodyLimitMiddleware` checks inside Django (and serves the test client).
Django's own DATA_UPLOAD_MAX_MEMORY_SIZE would answer a 400, and only when a view reads
the body.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.deprecation import MiddlewareMixin

from labsettings import lab_settings

from .errors import ApiError


def body_limit(path: str) -> int:
    """The limit for a path: the longest matching prefix in max_request_bytes_by_path, or
    max_request_bytes."""
    by_path = lab_settings.max_request_bytes_by_path
    matches = [prefix for prefix in by_path if path.startswith(prefix)]
    return by_path[max(matches, key=len)] if matches else lab_settings.max_request_bytes


def body_size(request: HttpRequest) -> int:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    stream = getattr(request, "_stream", None)
    try:  # ASGI: a spooled file holding the whole body; the test client's stream cannot seek
        position = stream.tell()
        actual = stream.seek(0, os.SEEK_END)
        stream.seek(position)
    except (AttributeError, OSError, ValueError):
        actual = 0
    return max(declared, actual)


def routed_path(path: str, root_path: str) -> str:
    """The path Django routes on: `path` less the root path, where it starts with it."""
    return path.removeprefix(root_path) if root_path and path.startswith(root_path) else path


def route_view(path: str) -> Callable | None:
    """The view that serves a routed path, or None: it gives a refusal its error shape."""
    try:
        return resolve(path).func
    except Resolver404:
        return None


def _route_error(
    path: str, view: Callable | None, message: str, status: int, code: str
) -> HttpResponse:
    render_error = getattr(view, "render_error", None)
    if render_error is None and path.startswith("/v1/"):
        render_error = ApiError.response
    if render_error is not None:
        return render_error(ApiError(message, status=status, code=code))
    if getattr(view, "cls", None) is not None:  # a DRF view: DRF's own error shape
        return JsonResponse({"detail": message}, status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def too_large_response(path: str, view: Callable | None, size: int, limit: int) -> HttpResponse:
    """The 413 for a body on `path` (routed path), in the shape of the view that serves it."""
    message = f"Request body of {size} bytes is larger than the {limit} bytes allowed on {path}."
    return _route_error(path, view, message, 413, "request_too_large")


def body_timeout_response(path: str, view: Callable | None, seconds: float) -> HttpResponse:
    """The 408 for a body on `path` that did not arrive within `seconds` of its headers."""
    message = f"The request body did not arrive within {seconds:g} seconds."
    return _route_error(path, view, message, 408, "request_timeout")


class BodyLimitMiddleware(MiddlewareMixin):
    """Place before CsrfViewMiddleware, whose process_view may read a form body."""

    def process_view(self, request: HttpRequest, view: Callable, args, kwargs):
        # On the request's thread with the rest of the chain (mlxlab/asgi_handler.py).
        path = request.path_info
        limit, size = body_limit(path), body_size(request)
        return too_large_response(path, view, size, limit) if size > limit else None


def _routed_path(scope: dict) -> str:
    return routed_path(scope.get("path", "/"), scope.get("root_path", ""))


def _declared_length(scope: dict) -> int:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


async def _send_response(send, response: HttpResponse) -> None:
    headers = [
        (name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()
    ]
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


class BodyLimitGuard:
    """ASGI middleware: a 413 before the app reads an oversized body (see the module's note)."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.application(scope, receive, send)
        path = _routed_path(scope)
        limit = body_limit(path)
        if (declared := _declared_length(scope)) > limit:
            return await self._refuse(send, path, declared, limit)
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:  # answer now; Django sees the client gone
                    await self._refuse(send, path, received, limit)
                    return {"type": "http.disconnect"}
            return message

        return await self.application(scope, counted, send)

    async def _refuse(self, send, path: str, size: int, limit: int) -> None:
        await _send_response(send, too_large_response(path, route_view(path), size, limit))
