"""Who a /v1 request is for, as the limits and the usage record see it."""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest

from labsettings import lab_settings

from .api_keys import key_user
from .models import UserLimits
from .rate_limits import RateLimiter, Rates


@dataclass(frozen=True)
class Caller:
    """`name` counts: "key:12", "user:3" (a lab session), "static" or "anonymous"."""

    name: str
    user_id: int | None = None
    key_id: int | None = None
    rates: Rates = Rates()
    monthly_tokens: int | None = None  # the user's budget


def caller_of(request: HttpRequest) -> Caller:
    """The caller of a request that passed access (api/access.py): its key's limits, or
    its session user's, each unset one the server's default (blocking)."""
    check = getattr(request, "api_key", None)
    if check is not None and check.key is not None:
        key = check.key
        own = _user_limits(key.user_id)
        return Caller(f"key:{key.pk}", key.user_id, key.pk, _rates(key),
                      own.monthly_tokens if own else None)  # fmt: skip
    if check is not None:  # a static key: the service user's budget, the default rates
        user = key_user(check)
        own = _user_limits(user.pk)
        return Caller("static", user.pk, None, _rates(None), own.monthly_tokens if own else None)
    user = request.user if hasattr(request, "user") else None
    if user is not None and user.is_authenticated:
        return caller_for_user(user)
    return Caller("anonymous", rates=_rates(None))


acaller_of = sync_to_async(caller_of)


def caller_for_user(user) -> Caller:
    """A lab session's caller (the chat page's websocket), as `caller_of` makes it."""
    own = _user_limits(user.pk)
    return Caller(f"user:{user.pk}", user.pk, None, _rates(own),
                  own.monthly_tokens if own else None)  # fmt: skip


acaller_for_user = sync_to_async(caller_for_user)


def _user_limits(user_id: int) -> UserLimits | None:
    return UserLimits.objects.filter(user_id=user_id).first()


def _rates(own) -> Rates:
    """Each of the row's limits, or the server's where the row leaves it unset."""
    rpm = own.rpm if own is not None and own.rpm is not None else lab_settings.rate_limit_rpm
    tpm = own.tpm if own is not None and own.tpm is not None else lab_settings.rate_limit_tpm
    return Rates(rpm, tpm)


_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def rate_limiter() -> RateLimiter:
    """The limiter of this event loop (Redis' async connections belong to one loop).

    Its keys are named after the database, so web replicas of one lab share counters and
    two labs on one Redis do not.
    """
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        database = settings.DATABASES["default"]
        where = f"{database.get('HOST') or ''}:{database.get('PORT') or ''}/{database['NAME']}"
        namespace = hashlib.sha256(where.encode()).hexdigest()[:12]
        window = lab_settings.rate_limit_window_seconds
        limiter = _limiters[loop] = RateLimiter(settings.REDIS_URL, namespace, window)
    return limiter
