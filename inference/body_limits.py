"""Request body size limits for every endpoint: a 413 in the endpoint's own error shape.

Django's own DATA_UPLOAD_MAX_MEMORY_SIZE answers an oversized body with a 400,
and only when a view reads it; this middleware answers 413 before the view
runs. Under ASGI the server has already buffered the body (spooled to disk
past FILE_UPLOAD_MAX_MEMORY_SIZE), so both the declared and the real length
are checked: a chunked body declares none.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

from .api.errors import ApiError


def body_limit(path: str) -> int:
    """The limit for a path: the longest matching prefix in MAX_REQUEST_BYTES_BY_PATH, or
    MAX_REQUEST_BYTES."""
    options = settings.MLXLAB
    by_path: dict[str, int] = options.get("MAX_REQUEST_BYTES_BY_PATH", {})
    matches = [prefix for prefix in by_path if path.startswith(prefix)]
    return by_path[max(matches, key=len)] if matches else options["MAX_REQUEST_BYTES"]


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


def too_large_response(request: HttpRequest, view: Callable, size: int, limit: int) -> HttpResponse:
    message = (
        f"Request body of {size} bytes is larger than the {limit} bytes allowed on {request.path}."
    )
    render_error = getattr(view, "render_error", None)
    if render_error is None and request.path.startswith("/v1/"):
        render_error = ApiError.response
    if render_error is not None:
        return render_error(ApiError(message, status=413, code="request_too_large"))
    if getattr(view, "cls", None) is not None:  # a DRF view: DRF's own error shape
        return JsonResponse({"detail": message}, status=413)
    return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")


class BodyLimitMiddleware(MiddlewareMixin):
    """Place before CsrfViewMiddleware, whose process_view may read a form body."""

    async def process_view(self, request: HttpRequest, view: Callable, args, kwargs):
        # async: under ASGI it runs on the loop, not in the thread the ORM shares.
        limit, size = body_limit(request.path), body_size(request)
        return too_large_response(request, view, size, limit) if size > limit else None
