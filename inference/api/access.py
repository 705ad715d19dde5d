"""Who may call /v1: an API key, or a logged-in lab session that passes CSRF.

With no key configured at all the API is open (as mlx_lm.server is), and
`runlab` then refuses to listen beyond loopback unless told to. Nothing here is
cached, so a revoked key stops working on its next request. The status endpoints'
detail asks more: a staff user (`caller_is_staff`).
"""

from __future__ import annotations

from django.http import HttpRequest

from access.api_keys import acheck_key, akeys_exist, presented_key
from access.csrf import csrf_passes

from ..errors import ApiError


def unauthorized(message: str) -> ApiError:
    # OpenAI answers a missing or wrong key with this type and code.
    return ApiError(message, status=401, type="invalid_request_error", code="invalid_api_key")


def staff_only() -> ApiError:
    return ApiError(
        "Only staff users, or their API keys, may read this.",
        status=403,
        type="permission_error",
        code="staff_only",
    )


MISSING_KEY = (
    "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
)


async def caller_id(request: HttpRequest) -> str:
    """Who is calling, as a stable name: a key's user, the static keys, a session's user,
    or anonymous (an open API)."""
    check = getattr(request, "api_key", None)
    if check is not None:
        return "static" if check.static else f"user:{check.key.user_id}"
    user = await request.auser()
    return f"user:{user.pk}" if user.is_authenticated else "anonymous"


async def api_access_error(request: HttpRequest) -> ApiError | None:
    """None when the request may go on, else the 401 to answer with.

    A valid key wins; without one the API is open only while no key exists.
    A wrong key sent to an open API is ignored (OpenAI clients must send some key).
    """
    raw = presented_key(request)
    if raw is not None:
        check = await acheck_key(raw)
        if check.ok:
            request.api_key = check  # who called, for the views that want to know
            return None
    if not await akeys_exist():
        return None
    if raw is not None:
        return unauthorized(check.reason)
    user = await request.auser()
    if user.is_authenticated and user.is_active and csrf_passes(request):
        return None
    return unauthorized(MISSING_KEY)


async def caller_is_staff(request: HttpRequest) -> bool:
    """Whether a staff user calls: through a valid key of theirs, else a logged-in session.

    A static key acts for the non-staff service user, so it never is; nor is anyone on an
    open API without a key, since "open" is about inference, not the server's innards.
    """
    check = getattr(request, "api_key", None)
    if check is None and (raw := presented_key(request)) is not None:
        check = await acheck_key(raw)
    if check is not None and check.ok:
        return check.key is not None and check.key.user.is_staff
    user = await request.auser()
    return bool(user.is_authenticated and user.is_active and user.is_staff)
