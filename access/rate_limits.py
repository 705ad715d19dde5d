"""Requests and tokens per minute, per caller, counted in Redis so web replicas share them.

Counted by `limits` (sliding window counters in Redis, `cost` for tokens): a maintained
limiter with async Redis storage and the window statistics (remaining, reset) that the
x-ratelimit headers need, where our own Lua would be code to own.

A request is admitted while its caller has requests left in the window and has not spent
its tokens; its tokens are spent once its tally is known (`spend`). Tokens are only known
after the answer, so one request may go past the limit; the next then waits.

Redis away: limits are not enforced (fail open), answers carry no rate-limit headers, and
the log says so at most once a minute. A limiter's outage must not become the API's.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

log = logging.getLogger(__name__)

OUTAGE_PAUSE = 5.0  # seconds without asking Redis after it failed: no timeout per request
CONNECT_TIMEOUT = 0.25  # loopback or LAN Redis answers in milliseconds


@dataclass(frozen=True)
class Rates:
    """A caller's limits per window; 0: none."""

    rpm: int = 0
    tpm: int = 0

    @property
    def any(self) -> bool:
        return bool(self.rpm or self.tpm)


@dataclass(frozen=True)
class Window:
    """One limit's state after this request: for the x-ratelimit headers."""

    limit: int
    remaining: int
    reset_seconds: float


@dataclass(frozen=True)
class Admission:
    """The verdict on one request: `refused` is "requests" or "tokens" when over a limit."""

    refused: str | None = None
    requests: Window | None = None
    tokens: Window | None = None
    retry_after: float = 0.0
    counted: bool = field(default=True)  # False: Redis was away, nothing was enforced


class RateLimiter:
    def __init__(self, redis_url: str, namespace: str, window_seconds: int) -> None:
        uri = "async+" + redis_url if "://" in redis_url else redis_url
        self._storage = RedisStorage(
            uri, implementation="redispy", key_prefix=f"mlxlab-rate:{namespace}",
            socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=CONNECT_TIMEOUT,
        )  # fmt: skip
        self._limiter = SlidingWindowCounterRateLimiter(self._storage)
        self.window = window_seconds
        self._paused_until = 0.0
        self._warned_at = -math.inf

    async def admit(self, caller: str, rates: Rates) -> Admission:
        """Count one request of `caller` and say whether it may go on."""
        if not rates.any:
            return Admission()
        if time.monotonic() < self._paused_until:
            return Admission(counted=False)
        try:
            return await self._admit(caller, rates)
        except Exception as error:  # Redis away or failing: serve, unlimited, and say so
            self._outage(error)
            return Admission(counted=False)

    async def spend(self, caller: str, rates: Rates, tokens: int) -> None:
        """Spend a finished request's tokens (as many as the window still holds)."""
        if not rates.tpm or tokens <= 0 or time.monotonic() < self._paused_until:
            return
        item = self._item(rates.tpm)
        try:
            stats = await self._limiter.get_window_stats(item, caller)
            if stats.remaining > 0:
                await self._limiter.hit(item, caller, cost=min(tokens, stats.remaining))
        except Exception as error:
            self._outage(error)

    async def _admit(self, caller: str, rates: Rates) -> Admission:
        tokens = await self._window(rates.tpm, caller) if rates.tpm else None
        if tokens is not None and tokens.remaining <= 0:
            return Admission("tokens", await self._window(rates.rpm, caller), tokens,
                             tokens.reset_seconds)  # fmt: skip
        if not rates.rpm:
            return Admission(tokens=tokens)
        item = self._item(rates.rpm)
        allowed = await self._limiter.hit(item, caller)
        requests = await self._window(rates.rpm, caller)
        if not allowed:
            return Admission("requests", requests, tokens, requests.reset_seconds)
        return Admission(requests=requests, tokens=tokens)

    async def _window(self, amount: int, caller: str) -> Window | None:
        if not amount:
            return None
        stats = await self._limiter.get_window_stats(self._item(amount), caller)
        reset = max(stats.reset_time - time.time(), 0.0)
        return Window(amount, max(stats.remaining, 0), reset)

    def _item(self, amount: int) -> RateLimitItemPerSecond:
        return RateLimitItemPerSecond(amount, self.window)

    def _outage(self, error: Exception) -> None:
        now = time.monotonic()
        self._paused_until = now + OUTAGE_PAUSE
        if now - self._warned_at > 60:
            self._warned_at = now
            log.warning("rate limits are not enforced: Redis does not answer (%s)", error)


def retry_after_header(seconds: float) -> str:
    """Whole seconds, at least one: what Retry-After allows."""
    return str(max(1, math.ceil(seconds)))
