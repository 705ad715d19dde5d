"""The decorator every API view wears."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..accounting import CALLER
from ..errors import ApiError
from .access import api_access_error, caller_is_staff, staff_only
from .limits import admit

ErrorRenderer = Callable[[ApiError], HttpResponse]


def method_not_allowed(
    request: HttpRequest, allowed: str, render_error: ErrorRenderer = ApiError.response
) -> HttpResponse:
    error = ApiError(f"Method {request.method} is not allowed on {request.path}", status=405)
    response = render_error(error)
    response["Allow"] = allowed
    return response


def api_endpoint(
    *methods: str,
    render_error: ErrorRenderer = ApiError.response,
    public: bool = False,
    staff: bool = False,
):
    """An async API view: no CSRF (its clients are programs), its methods, a 405 otherwise.

    Unless `public`, it needs an API key once any exists (a 401 otherwise; see
    api/access.py); with `staff`, a staff user's key or session besides (a 403).
    `render_error` gives the 401, 403, 405, 413 (body_limits.py) and 429 (limits.py) their
    protocol's shape (OpenAI's by default). Every call but a status route's counts against
    its caller's rate limits and budget, and its generations' usage is recorded.
    """

    def wrap(view):
        @csrf_exempt
        @functools.wraps(view)
        async def endpoint(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not public and (denied := await api_access_error(request)) is not None:
                response = render_error(denied)
                response["WWW-Authenticate"] = 'Bearer realm="mlxlab"'
                return response
            if staff and not await caller_is_staff(request):
                return render_error(staff_only())
            if request.method not in methods:
                return method_not_allowed(request, ", ".join(methods), render_error)
            if public or staff:  # status routes: no limits, no usage
                return await view(request, *args, **kwargs)
            caller, response, headers = await admit(request, render_error)
            if response is None:  # within its limits: served, and its usage recorded
                token = CALLER.set(caller)
                try:
                    response = await view(request, *args, **kwargs)
                finally:
                    CALLER.reset(token)
            for name, value in headers.items():
                response[name] = value
            return response

        endpoint.render_error = render_error
        return endpoint

    return wrap
