"""GET /api/usage: who used what, from the usage record (usage.py)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .error_responses import errors
from .models import ApiKey
from .usage import FIGURES, GROUPS, usage_totals

MAX_DAYS = 366


class UsageQuerySerializer(serializers.Serializer):
    start = serializers.DateField(required=False, help_text="First day (UTC); default: the 1st.")
    end = serializers.DateField(required=False, help_text="Last day, inclusive; default: today.")
    group_by = serializers.ChoiceField(choices=list(GROUPS), default="model")

    def validate(self, data: dict) -> dict:
        today = timezone.now().date()
        data.setdefault("end", today)
        data.setdefault("start", data["end"].replace(day=1))
        if data["start"] > data["end"]:
            raise serializers.ValidationError({"start": "start is after end."})
        if data["end"] - data["start"] > timedelta(days=MAX_DAYS):
            raise serializers.ValidationError({"start": f"At most {MAX_DAYS} days at once."})
        return data


class UsageRowSerializer(serializers.Serializer):
    group = serializers.CharField(help_text="The key, model, day or user of this row.")
    label = serializers.CharField(help_text="How to show the group (a key's prefix and label).")
    requests = serializers.IntegerField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class UsageSerializer(serializers.Serializer):
    start = serializers.DateField()
    end = serializers.DateField()
    group_by = serializers.CharField()
    scope = serializers.ChoiceField(choices=["mine", "everyone"])
    data = UsageRowSerializer(many=True)
    totals = UsageRowSerializer()


class UsageApi(APIView):
    """Your usage; a staff user's is everyone's."""

    @extend_schema(
        parameters=[UsageQuerySerializer],
        responses={200: UsageSerializer, **errors(400)},
        summary="Requests and tokens by key, model, day or user",
    )
    def get(self, request: Request) -> Response:
        # A plain dict: from a QueryDict, DRF reads "start=" as absent and takes the default.
        query = UsageQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        start, end, group_by = (query.validated_data[k] for k in ("start", "end", "group_by"))
        everyone = request.user.is_staff
        rows = usage_totals(start, end, group_by, None if everyone else request.user.pk)
        data = [_row(row[group_by], row, group_by) for row in rows]
        return Response({
            "start": start, "end": end, "group_by": group_by,
            "scope": "everyone" if everyone else "mine",
            "data": data,
            "totals": _row("all", {f: sum(r[f] for r in data) for f in FIGURES}, "all"),
        })  # fmt: skip


def _row(group, figures: dict, group_by: str) -> dict:
    group = "" if group is None else str(group)
    return {
        "group": group,
        "label": _key_label(group) if group_by == "key" else group,
        **{f: figures[f] or 0 for f in FIGURES},
        "total_tokens": (figures["prompt_tokens"] or 0) + (figures["completion_tokens"] or 0),
    }


def _key_label(caller: str) -> str:
    """ "key:12" as its prefix and label; the lab session and static keys as words."""
    if caller.startswith("key:"):
        key = ApiKey.objects.filter(pk=int(caller[4:])).first()
        return f"{key.prefix}… {key.label}".strip() if key else "a deleted key"
    if caller.startswith("user:"):
        return "the lab (session)"
    return {"static": "static keys", "anonymous": "no key (open API)"}.get(caller, caller)
