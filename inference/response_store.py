"""Services and selectors for stored /v1/responses, bounded by age and bytes."""

from __future__ import annotations

import json
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from .models import StoredResponse

# A chain longer than this is almost surely a loop or abuse; stop walking.
MAX_CHAIN = 1000


def response_get(*, response_id: str) -> StoredResponse | None:
    """The stored response, unless it never existed or has expired."""
    return StoredResponse.objects.filter(id=response_id, expires_at__gt=timezone.now()).first()


def response_chain(*, response_id: str) -> list[StoredResponse] | None:
    """The conversation ending at `response_id`, oldest first; None when it is unknown."""
    chain = []
    current = response_get(response_id=response_id)
    if current is None:
        return None
    while current is not None and len(chain) < MAX_CHAIN:
        chain.append(current)
        current = current.previous
    return chain[::-1]


@transaction.atomic
def response_store(
    *, body: dict, input_items: list[dict], instructions: str, previous_id: str | None
) -> StoredResponse:
    """Save a finished response, then evict what is expired or over the byte budget."""
    size = len(json.dumps(body)) + len(json.dumps(input_items))
    text = "".join(
        part.get("text", "")
        for item in body.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    )
    stored = StoredResponse.objects.create(
        id=body["id"],
        model=body["model"],
        previous_id=previous_id,
        instructions=instructions or "",
        input_items=input_items,
        output_items=body.get("output", []),
        body=body,
        output_text=text,
        status=body.get("status", "completed"),
        usage=body.get("usage") or {},
        size_bytes=size,
        expires_at=timezone.now() + timedelta(seconds=settings.MLXLAB["RESPONSES_TTL_SECONDS"]),
    )
    _evict(keep=stored.id)
    return stored


def response_delete(*, response_id: str) -> bool:
    deleted, _ = StoredResponse.objects.filter(id=response_id).delete()
    return deleted > 0


def _evict(*, keep: str) -> None:
    StoredResponse.objects.filter(expires_at__lte=timezone.now()).delete()
    budget = settings.MLXLAB["RESPONSES_MAX_BYTES"]
    total = StoredResponse.objects.aggregate(total=Sum("size_bytes"))["total"] or 0
    for response_id, size in (
        StoredResponse.objects.exclude(id=keep)
        .order_by("created_at")
        .values_list("id", "size_bytes")
    ):
        if total <= budget:
            break
        StoredResponse.objects.filter(id=response_id).delete()
        total -= size


def response_store_stats() -> dict:
    """Entries and bytes held, and the bounds (the /engine report's `response_store`)."""
    totals = StoredResponse.objects.aggregate(total=Sum("size_bytes"), entries=Count("id"))
    return {
        "entries": totals["entries"] or 0,
        "bytes": totals["total"] or 0,
        "max_bytes": settings.MLXLAB["RESPONSES_MAX_BYTES"],
        "ttl_ms": settings.MLXLAB["RESPONSES_TTL_SECONDS"] * 1000,
    }
