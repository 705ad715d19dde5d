"""/v1 open while no key exists, closed once one does; a lab session passes with CSRF."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client

from access.api_keys import api_key_create, api_key_revoke


@pytest.fixture
def member(db) -> User:
    return User.objects.create_user("member", password="pw-member-123")


def test_open_without_keys_even_with_a_junk_key(client, db):
    assert client.get("/v1/models").status_code == 200
    assert client.get("/v1/models", headers={"Authorization": "Bearer unused"}).status_code == 200


def test_closed_once_a_key_exists_and_after_revoking_it(client, member):
    key, raw = api_key_create(user=member)
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers={"x-api-key": raw}).status_code == 200
    api_key_revoke(key=key)
    # A revoked key still counts: revoking the last key must not reopen the API.
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers={"x-api-key": raw}).status_code == 401
    key.delete()
    assert client.get("/v1/models").status_code == 200


def test_static_keys_close_the_api(client, db, settings):
    static = "mlx-static-0123456789abcdefghijklmnopqrstuvwxyz"
    digest = hashlib.sha256(static.encode()).hexdigest()
    settings.MLXLAB = settings.MLXLAB.replace(static_api_key_digests=(digest,))
    assert client.get("/v1/models").status_code == 401
    ok = client.get("/v1/models", headers={"Authorization": f"Bearer {static}"})
    assert ok.status_code == 200


def test_a_lab_session_passes_with_csrf(member):
    api_key_create(user=member)
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    assert client.get("/v1/models").status_code == 200  # a safe method needs no token
    # A POST without the token is refused, as a cross-site form post would be.
    body = {"model": "no-such-model", "prompt": "x"}
    refused = client.post("/v1/completions", body, content_type="application/json")
    assert refused.status_code == 401
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    passed = client.post(
        "/v1/completions", body, content_type="application/json", headers={"X-CSRFToken": token}
    )
    assert passed.status_code == 404  # past the key check: the model is the problem


def test_health_is_public_stats_is_not(client, member):
    api_key_create(user=member)
    assert client.get("/health").status_code == 200
    assert client.get("/stats").status_code == 401


def test_wrong_method_needs_a_key_first(client, member):
    _, raw = api_key_create(user=member)
    assert client.put("/v1/models").status_code == 401
    response = client.put("/v1/models", headers={"x-api-key": raw})
    assert response.status_code == 405 and response["Allow"] == "GET"
