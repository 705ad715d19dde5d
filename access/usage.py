"""The usage record: one row per caller, model and day, counted up atomically; totals."""

from __future__ import annotations

from datetime import date

from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone

from .callers import Caller
from .models import UsageDay

GROUPS = {"key": "caller", "model": "model", "day": "day", "user": "user__username"}
FIGURES = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens")


def record_usage(caller: Caller, model: str, prompt: int, completion: int, cached: int) -> None:
    """Add one request to today's row of (caller, model): an UPDATE, or the row's INSERT
    when it is the day's first (a concurrent first loses the race and updates)."""
    counts = {"requests": 1, "prompt_tokens": prompt, "completion_tokens": completion,
              "cached_tokens": cached}  # fmt: skip
    row = {"day": timezone.now().date(), "caller": caller.name, "model": model}
    added = {name: F(name) + value for name, value in counts.items()}
    if UsageDay.objects.filter(**row).update(**added):
        return
    try:
        with transaction.atomic():
            UsageDay.objects.create(**row, user_id=caller.user_id, key_id=caller.key_id, **counts)
    except IntegrityError:
        UsageDay.objects.filter(**row).update(**added)


def month_tokens(user_id: int) -> int:
    """Prompt and completion tokens of the user's callers this calendar month (UTC)."""
    first = timezone.now().date().replace(day=1)
    totals = UsageDay.objects.filter(user_id=user_id, day__gte=first).aggregate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")
    )
    return (totals["prompt"] or 0) + (totals["completion"] or 0)


def usage_totals(start: date, end: date, group_by: str, user_id: int | None = None) -> list[dict]:
    """Totals from `start` to `end` (inclusive), grouped; one user's, or everyone's (None)."""
    rows = UsageDay.objects.filter(day__gte=start, day__lte=end)
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    field = GROUPS[group_by]
    grouped = rows.values(field).annotate(**{f: Sum(f) for f in FIGURES}).order_by(field)
    return [{group_by: _plain(row[field]), **{f: row[f] for f in FIGURES}} for row in grouped]


def _plain(value) -> str | None:
    return value.isoformat() if isinstance(value, date) else value
