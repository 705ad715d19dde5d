"""Services and selectors for stored /v1/responses, bounded by age and bytes.

Every response belongs to the caller that created it (`owner`, api/access.py
caller_id): another caller's id reads as unknown, and the byte budget is each
owner's own, so nobody can flush another's history.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from labsettings import lab_settings

from .models import StoredResponse

# A chain longer than this is almost surely a loop or abuse; stop walking.
MAX_CHAIN = 1000


class BrokenChain(Exception):
    """An earlier response of the chain is gone (deleted, expired or evicted)."""

    def __init__(self, missing_id: str) -> None:
        super().__init__(missing_id)
        self.missing_id = missing_id


def response_get(*, response_id: str, owner: str | None) -> StoredResponse | None:
    """`owner`'s stored response, unless it never existed, has expired or is another's.

    `owner` None: anyone's (the admin site and staff jobs).
    """
    found = StoredResponse.objects.filter(id=response_id, expires_at__gt=timezone.now())
    return (found if owner is None else found.filter(owner=owner)).first()


def response_chain(*, response_id: str, owner: str | None) -> list[StoredResponse] | None:
    """The conversation ending at `response_id`, oldest first; None when it is unknown.

    Raises BrokenChain when an earlier turn is missing.
    """
    chain = []
    current = response_get(response_id=response_id, owner=owner)
    if current is None:
        return None
    while len(chain) < MAX_CHAIN:
        chain.append(current)
        if not current.previous_ref:
            break
        earlier = response_get(response_id=current.previous_ref, owner=current.owner)
        if earlier is None:
            raise BrokenChain(current.previous_ref)
        current = earlier
    return chain[::-1]


@transaction.atomic
def response_store(
    *,
    body: dict,
    input_items: list[dict],
    instructions: str,
    previous_id: str | None,
    owner: str,
) -> StoredResponse:
    """Save a finished response, then evict what is expired or over the owner's budget.

    The previous response may have been deleted while this one was generated: the new
    one is kept all the same, and continuing it is refused as a broken chain.
    """
    size = len(json.dumps(body)) + len(json.dumps(input_items))
    text = "".join(
        part.get("text", "")
        for item in body.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    )
    previous_exists = StoredResponse.objects.filter(id=previous_id, owner=owner).exists()
    stored = StoredResponse.objects.create(
        id=body["id"],
        owner=owner,
        model=body["model"],
        previous_id=previous_id if previous_exists else None,
        previous_ref=previous_id or "",
        instructions=instructions or "",
        input_items=input_items,
        output_items=body.get("output", []),
        body=body,
        output_text=text,
        status=body.get("status", "completed"),
        usage=body.get("usage") or {},
        size_bytes=size,
        expires_at=timezone.now() + timedelta(seconds=lab_settings.responses_ttl_seconds),
    )
    _evict(keep=stored.id, owner=owner)
    return stored


def response_delete(*, response_id: str, owner: str) -> bool:
    deleted, _ = StoredResponse.objects.filter(id=response_id, owner=owner).delete()
    return deleted > 0


def _evict(*, keep: str, owner: str) -> None:
    StoredResponse.objects.filter(expires_at__lte=timezone.now()).delete()
    budget = lab_settings.responses_max_bytes
    own = StoredResponse.objects.filter(owner=owner)
    total = own.aggregate(total=Sum("size_bytes"))["total"] or 0
    for response_id, size in (
        own.exclude(id=keep).order_by("created_at").values_list("id", "size_bytes")
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
        "max_bytes": lab_settings.responses_max_bytes,
        "ttl_ms": lab_settings.responses_ttl_seconds * 1000,
    }
