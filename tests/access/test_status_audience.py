"""Status by audience (issue 56): a stranger's /health says `status` and `in_flight`;
/stats and /engine, and /health's detail, are for a staff user's key or session."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User
from django.test import Client

from access.api_keys import api_key_create

MINIMAL = {"status", "in_flight"}
DETAIL = {"isolated", "engine", "workers", "models_loaded"}
STATIC_KEY = "mlx-static-status-test-key"


@pytest.fixture
def keys(db, settings) -> dict[str, str]:
    """Keys exist (the API is closed): a staff user's, a member's and a static one."""
    staff = User.objects.create_user("staffer", is_staff=True)
    member = User.objects.create_user("member")
    digest = hashlib.sha256(STATIC_KEY.encode()).hexdigest()
    settings.MLXLAB = settings.MLXLAB.replace(static_api_key_digests=(digest,))
    return {
        "staff": api_key_create(user=staff)[1],
        "member": api_key_create(user=member)[1],
        "static": STATIC_KEY,
    }


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def session_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("case", ["none", "wrong", "member", "static"])
def test_health_tells_a_non_staff_caller_only_status_and_in_flight(client, keys, case):
    headers = {"none": {}, "wrong": bearer("mlx-wrong")}.get(case)
    headers = bearer(keys[case]) if headers is None else headers
    response = client.get("/health", headers=headers)
    assert response.status_code == 200
    assert set(response.json()) == MINIMAL


def test_health_tells_a_member_session_only_status_and_in_flight(keys):
    answer = session_of(User.objects.get(username="member")).get("/health").json()
    assert set(answer) == MINIMAL


def test_health_on_an_open_api_tells_a_stranger_only_status(client, db):
    # No key exists: /v1 is open, the server's innards are not.
    assert set(client.get("/health").json()) == MINIMAL


def test_staff_get_the_whole_health_report(client, keys):
    by_key = client.get("/health", headers=bearer(keys["staff"])).json()
    by_session = session_of(User.objects.get(username="staffer")).get("/health").json()
    for answer in (by_key, by_session):
        assert set(answer) == MINIMAL | DETAIL


@pytest.mark.parametrize("path", ["/stats", "/engine", "/metrics"])
@pytest.mark.parametrize("case", ["member", "static"])
def test_stats_and_engine_refuse_a_non_staff_key(client, keys, path, case):
    response = client.get(path, headers=bearer(keys[case]))
    assert response.status_code == 403
    error = response.json()["error"]  # the OpenAI shape these routes answer 401s in
    assert error["code"] == "staff_only" and error["type"] == "permission_error"
    assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("path", ["/stats", "/engine", "/metrics"])
def test_stats_and_engine_refuse_a_member_session_and_a_stranger(client, db, path):
    assert client.get(path).status_code == 403  # an open API: no key exists
    member = User.objects.create_user("member")
    assert session_of(member).get(path).status_code == 403
    api_key_create(user=member)
    assert client.get(path).status_code == 401  # keys exist: who is it, first


@pytest.mark.parametrize("path", ["/stats", "/engine"])
def test_stats_and_engine_answer_staff(client, keys, path):
    assert client.get(path, headers=bearer(keys["staff"])).status_code == 200
    staff = session_of(User.objects.get(username="staffer"))
    assert staff.get(path).status_code == 200


def test_metrics_answer_staff_in_prometheus_text(client, keys):
    response = client.get("/metrics", headers=bearer(keys["staff"]))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert "# TYPE mlxlab:time_to_first_token_seconds histogram" in text
    assert "# TYPE mlxlab:jobs_total counter" in text


def test_metrics_on_loopback_when_the_setting_says_so(client, keys, settings):
    assert client.get("/metrics").status_code == 401  # keys exist; loopback is no pass
    settings.MLXLAB = settings.MLXLAB.replace(metrics_access="loopback")
    assert client.get("/metrics").status_code == 200  # the test client comes from 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 401
