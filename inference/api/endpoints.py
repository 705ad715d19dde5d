"""The decorator every API view wears."""

from __future__ import annotations

import functools

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .errors import ApiError


def method_not_allowed(request: HttpRequest, allowed: str) -> JsonResponse:
    error = ApiError(f"Method {request.method} is not allowed on {request.path}", status=405)
    response = error.response()
    response["Allow"] = allowed
    return response


def api_endpoint(method: str):
    """An async API view: no CSRF (its clients are programs), one method, OpenAI-shaped 405."""

    def wrap(view):
        @csrf_exempt
        @functools.wraps(view)
        async def endpoint(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method != method:
                return method_not_allowed(request, method)
            return await view(request, *args, **kwargs)

        return endpoint

    return wrap
