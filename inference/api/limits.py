"""Rate limits and budgets at the API's door: the 429s and the headers the SDKs read.

OpenAI's answers carry `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`;
Anthropic's (`/v1/messages`) also `anthropic-ratelimit-{requests,tokens}-*`, resets as
RFC 3339 times. Refusals say `Retry-After` (and `retry-after-ms`, which the OpenAI SDK
reads first), so both SDKs' retries wait just long enough.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse

from access.callers import Caller, acaller_of, rate_limiter
from access.rate_limits import Admission, Window, retry_after_header
from access.usage import month_tokens

from ..errors import ApiError
from ..metrics import rate_limited
from ..request_ids import ANTHROPIC_PATH


async def admit(request: HttpRequest, render_error) -> tuple[Caller, HttpResponse | None, dict]:
    """The caller, its refusal (None: go on) and the headers every answer of it carries."""
    caller = await acaller_of(request)
    refusal, admission = await admission_of(caller)
    if admission is None:
        return caller, render_error(refusal), {}
    headers = limit_headers(admission, anthropic=request.path.startswith(ANTHROPIC_PATH))
    if refusal is None:
        return caller, None, headers
    response = render_error(refusal)
    response["Retry-After"] = retry_after_header(admission.retry_after)
    response["retry-after-ms"] = str(max(1, round(admission.retry_after * 1000)))
    return caller, response, headers


async def admission_of(caller: Caller) -> tuple[ApiError | None, Admission | None]:
    """Whether `caller` may make one more request: the refusal (None: yes), and the rate
    limits' verdict (None when the monthly budget refused it first). Counts the request."""
    if caller.monthly_tokens is not None:
        used = await sync_to_async(month_tokens)(caller.user_id)
        if used >= caller.monthly_tokens:
            rate_limited.labels("quota").inc()
            return _over_budget(caller, used), None
    admission = await rate_limiter().admit(caller.name, caller.rates)
    if admission.refused is None:
        return None, admission
    rate_limited.labels(admission.refused).inc()
    return _over_rate(admission), admission


def limit_headers(admission: Admission, *, anthropic: bool) -> dict[str, str]:
    headers = {}
    for kind, window in (("requests", admission.requests), ("tokens", admission.tokens)):
        if window is None:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(window.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(window.remaining)
        headers[f"x-ratelimit-reset-{kind}"] = duration(window.reset_seconds)
        if anthropic:
            headers[f"anthropic-ratelimit-{kind}-limit"] = str(window.limit)
            headers[f"anthropic-ratelimit-{kind}-remaining"] = str(window.remaining)
            headers[f"anthropic-ratelimit-{kind}-reset"] = _moment(window)
    return headers


def duration(seconds: float) -> str:
    """OpenAI's form: "20ms", "1s", "6m0s"."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def _moment(window: Window) -> str:
    at = datetime.now(UTC) + timedelta(seconds=window.reset_seconds)
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def _over_rate(admission: Admission) -> ApiError:
    kind = admission.refused
    window = admission.requests if kind == "requests" else admission.tokens
    return ApiError(
        f"Rate limit reached for {kind} per minute: limit {window.limit}, remaining "
        f"{window.remaining}. Please try again in {duration(admission.retry_after)}.",
        status=429, type=kind, code="rate_limit_exceeded",
    )  # fmt: skip


def _over_budget(caller: Caller, used: int) -> ApiError:
    return ApiError(
        f"You exceeded your monthly token budget ({used} of {caller.monthly_tokens} tokens "
        "used this month); ask an administrator to raise it.",
        status=429, type="insufficient_quota", code="insufficient_quota",
    )  # fmt: skip
