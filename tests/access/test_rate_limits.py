"""Rate limits, budgets and the usage record in-process (Django's client, the real Redis):
the headers, the 429 shapes, Redis away, the keys API and /api/usage. The SDKs' retries
on a live server are in test_rate_limits_live.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from access.api_keys import api_key_create
from access.callers import Caller
from access.models import ApiKey, UsageDay, UserLimits
from access.usage import month_tokens, record_usage


@pytest.fixture
def limits(redis_url, settings):
    """A fresh count: no earlier test's hits under the same key ids."""
    store = redis.Redis.from_url(redis_url)
    for name in store.scan_iter("mlxlab-rate:*"):
        store.delete(name)
    settings.MLXLAB = settings.MLXLAB.replace(rate_limit_window_seconds=30)
    return settings


@pytest.fixture
def member(db) -> User:
    return User.objects.create_user("member")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_key_with_rpm_2_is_refused_its_third_request(client, member, limits):
    _, raw = api_key_create(user=member, rpm=2)
    answers = [client.get("/v1/models", headers=bearer(raw)) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    first, _, refused = answers
    assert first["x-ratelimit-limit-requests"] == "2"
    assert first["x-ratelimit-remaining-requests"] == "1"
    assert first["x-ratelimit-reset-requests"].endswith("s")
    assert "x-ratelimit-limit-tokens" not in first  # no token limit set
    error = refused.json()["error"]
    assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused["Retry-After"]) <= 30
    assert int(refused["retry-after-ms"]) <= 30_000
    assert refused["x-ratelimit-remaining-requests"] == "0"


def test_the_server_default_applies_to_keys_without_their_own(client, member, limits):
    limits.MLXLAB = limits.MLXLAB.replace(rate_limit_rpm=1)
    _, defaulted = api_key_create(user=member)
    _, unlimited = api_key_create(user=member, rpm=0)
    assert client.get("/v1/models", headers=bearer(defaulted)).status_code == 200
    assert client.get("/v1/models", headers=bearer(defaulted)).status_code == 429
    for _ in range(3):
        answer = client.get("/v1/models", headers=bearer(unlimited))
        assert answer.status_code == 200 and "x-ratelimit-limit-requests" not in answer


def test_with_redis_away_requests_are_served_unlimited(client, member, limits):
    limits.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens on the discard port
    _, raw = api_key_create(user=member, rpm=1)
    answers = [client.get("/v1/models", headers=bearer(raw)) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert all("x-ratelimit-limit-requests" not in a for a in answers)


def test_a_spent_budget_is_a_429_insufficient_quota(client, member, limits):
    UserLimits.objects.create(user=member, monthly_tokens=100)
    key, raw = api_key_create(user=member)
    assert client.get("/v1/models", headers=bearer(raw)).status_code == 200
    caller = Caller(f"key:{key.pk}", member.pk, key.pk)
    record_usage(caller, "m", prompt=60, completion=40, cached=10)
    refused = client.get("/v1/models", headers=bearer(raw))
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "insufficient_quota" and "100 of 100" in error["message"]


def test_usage_rows_count_up_per_caller_model_and_day(member):
    caller = Caller("user:7", member.pk)
    for prompt, completion, cached in [(10, 5, 0), (20, 7, 16)]:
        record_usage(caller, "m", prompt=prompt, completion=completion, cached=cached)
    record_usage(caller, "other", prompt=1, completion=1, cached=0)
    row = UsageDay.objects.get(caller="user:7", model="m")
    assert (row.requests, row.prompt_tokens, row.completion_tokens, row.cached_tokens) == (
        2, 30, 12, 16,
    )  # fmt: skip
    last_month = timezone.now().date().replace(day=1) - timedelta(days=1)
    UsageDay.objects.create(day=last_month, caller="user:7", model="m", user=member,
                            prompt_tokens=1000, completion_tokens=1000)  # fmt: skip
    assert month_tokens(member.pk) == 44  # this month's only


def test_usage_api_shows_mine_and_staff_see_everyones(client, member):
    staff = User.objects.create_user("boss", is_staff=True)
    key, _ = api_key_create(user=member, label="laptop")
    record_usage(Caller(f"key:{key.pk}", member.pk, key.pk), "m", 10, 5, 0)
    record_usage(Caller(f"user:{staff.pk}", staff.pk), "m", 100, 50, 0)
    client.force_login(member)
    mine = client.get("/api/usage?group_by=key").json()
    assert mine["scope"] == "mine" and len(mine["data"]) == 1
    assert mine["data"][0]["label"].endswith("laptop")
    assert mine["totals"]["total_tokens"] == 15
    client.force_login(staff)
    everyone = client.get("/api/usage?group_by=model").json()
    assert everyone["scope"] == "everyone"
    assert everyone["data"] == [
        {"group": "m", "label": "m", "requests": 2, "prompt_tokens": 110,
         "completion_tokens": 55, "cached_tokens": 0, "total_tokens": 165},
    ]  # fmt: skip
    by_day = client.get("/api/usage?group_by=day").json()["data"]
    assert [row["group"] for row in by_day] == [timezone.now().date().isoformat()]


@pytest.mark.parametrize(
    "query",
    ["group_by=colour", "start=2026-02-30", "start=2026-03-02&end=2026-03-01",
     "start=2024-01-01&end=2026-01-01"],
)  # fmt: skip
def test_usage_api_refuses_bad_queries(client, member, query):
    client.force_login(member)
    assert client.get(f"/api/usage?{query}").status_code == 400


def test_keys_api_sets_limits_and_a_member_cannot_raise_them(client, member, settings):
    settings.MLXLAB = settings.MLXLAB.replace(rate_limit_rpm=10)
    client.force_login(member)
    made = client.post("/api/keys", {"label": "ci", "rpm": 5, "tpm": 1000},
                       content_type="application/json")  # fmt: skip
    assert made.status_code == 201 and (made.json()["rpm"], made.json()["tpm"]) == (5, 1000)
    key_id = made.json()["id"]
    for raised in ({"rpm": 11}, {"rpm": 0}):
        answer = client.patch(f"/api/keys/{key_id}", raised, content_type="application/json")
        assert answer.status_code == 400 and "Only staff" in answer.json()["rpm"][0]
    lowered = client.patch(f"/api/keys/{key_id}", {"rpm": 3}, content_type="application/json")
    assert lowered.status_code == 200 and ApiKey.objects.get(pk=key_id).rpm == 3
    member.is_staff = True
    member.save()
    raised = client.patch(f"/api/keys/{key_id}", {"rpm": 0}, content_type="application/json")
    assert raised.status_code == 200 and ApiKey.objects.get(pk=key_id).rpm == 0


def test_create_api_key_takes_rpm_and_tpm(member, capsys):
    call_command("create_api_key", "--user", "member", "--rpm", "2", "--tpm", "500")
    key = ApiKey.objects.get(user=member)
    assert (key.rpm, key.tpm) == (2, 500)
    assert capsys.readouterr().out.strip().startswith("mlx-")
