"""/api: an API key of the user or a session with CSRF; staff-only where it says so."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client

from access.api_keys import api_key_create, api_key_revoke
from access.models import ApiKey

# (method, path, body, the member's status, the staff's status)
OPERATIONS = [
    ("get", "/api/me", None, 200, 200),
    ("get", "/api/keys", None, 200, 200),
    ("post", "/api/keys", {"label": "new"}, 201, 201),
    ("delete", "/api/keys/{own}", None, 204, 204),
    ("get", "/api/settings/access", None, 403, 200),
]


@pytest.fixture
def people(db) -> dict:
    staff = User.objects.create_user("staffer", password="pw-staff-123", is_staff=True)
    member = User.objects.create_user("member", password="pw-member-123")
    keys = {
        "staff": api_key_create(user=staff, label="s")[1],
        "member": api_key_create(user=member, label="m")[1],
    }
    old, keys["revoked"] = api_key_create(user=member, label="old")
    api_key_revoke(key=old)
    return {"staff": staff, "member": member, "keys": keys}


def request(client: Client, method: str, path: str, body, people, who: str, **headers):
    owner = people["staff" if who == "staff" else "member"]
    own = ApiKey.objects.filter(user=owner, revoked_at__isnull=True).first()
    path = path.format(own=own.pk)
    send = getattr(client, method)
    if body is None:
        return send(path, headers=headers)
    return send(path, body, content_type="application/json", headers=headers)


@pytest.mark.parametrize("case", ["none", "wrong", "revoked"])
@pytest.mark.parametrize(("method", "path", "body", "member", "staff"), OPERATIONS)
def test_refused_without_a_valid_credential(
    client, people, method, path, body, member, staff, case
):
    key = {"none": None, "wrong": "mlx-" + "y" * 43, "revoked": people["keys"]["revoked"]}[case]
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    response = request(client, method, path, body, people, "member", **headers)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert set(response.json()) == {"detail"}


@pytest.mark.parametrize("who", ["member", "staff"])
@pytest.mark.parametrize("header", ["Authorization", "x-api-key"])
@pytest.mark.parametrize(("method", "path", "body", "member", "staff"), OPERATIONS)
def test_with_a_key(client, people, method, path, body, member, staff, who, header):
    key = people["keys"][who]
    value = f"Bearer {key}" if header == "Authorization" else key
    response = request(client, method, path, body, people, who, **{header: value})
    expected = staff if who == "staff" else member
    if who == "member" and path.startswith("/api/keys") and method != "get":
        expected = 403  # a member's key cannot mint or revoke keys: only a session can
    assert response.status_code == expected, response.content


@pytest.mark.parametrize("who", ["member", "staff"])
@pytest.mark.parametrize(("method", "path", "body", "member", "staff"), OPERATIONS)
def test_with_a_session_and_csrf(people, method, path, body, member, staff, who):
    client = Client(enforce_csrf_checks=True)
    client.force_login(people[who])
    token = _csrf_token(client)
    response = request(client, method, path, body, people, who, **{"X-CSRFToken": token})
    assert response.status_code == (staff if who == "staff" else member), response.content


def _csrf_token(client: Client) -> str:
    """A CSRF secret in the cookie and the same in the header, as the lab's pages will send."""
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    return token


def test_a_session_without_csrf_cannot_write(people):
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["member"])
    assert client.get("/api/keys").status_code == 200  # reads need no token
    response = client.post("/api/keys", {"label": "x"}, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_me_says_how_the_user_came_in(client, people):
    by_key = client.get("/api/me", headers={"x-api-key": people["keys"]["member"]}).json()
    assert by_key["username"] == "member" and by_key["authenticated_by"] == "api_key"
    assert by_key["api_key"] == people["keys"]["member"][:12] and not by_key["is_staff"]
    client.force_login(people["staff"])
    by_session = client.get("/api/me").json()
    assert by_session == {
        "id": people["staff"].pk,
        "username": "staffer",
        "is_staff": True,
        "authenticated_by": "session",
        "api_key": None,
    }


def test_keys_are_shown_once_and_listed_by_prefix(client, people):
    auth = {"x-api-key": people["keys"]["staff"]}
    created = client.post(
        "/api/keys", {"label": "laptop"}, content_type="application/json", headers=auth
    ).json()
    assert created["key"].startswith("mlx-") and created["prefix"] == created["key"][:12]
    listed = client.get("/api/keys", headers=auth).json()
    assert {key["label"] for key in listed} == {"s", "laptop"}
    assert all("key" not in key and "digest" not in key for key in listed)
    stored = ApiKey.objects.get(pk=created["id"])
    assert stored.digest == hashlib.sha256(created["key"].encode()).hexdigest()
    # The new key works, then stops working once revoked.
    new = {"x-api-key": created["key"]}
    assert client.get("/api/me", headers=new).status_code == 200
    assert client.delete(f"/api/keys/{created['id']}", headers=auth).status_code == 204
    assert client.get("/api/me", headers=new).status_code == 401


def test_a_members_key_cannot_mint_or_revoke_keys(client, people):
    """A leaked key must not be able to make itself a successor before it is revoked."""
    auth = {"x-api-key": people["keys"]["member"]}
    minted = client.post("/api/keys", {"label": "x"}, content_type="application/json", headers=auth)
    assert minted.status_code == 403 and "logged-in session" in minted.json()["detail"]
    own = ApiKey.objects.get(user=people["member"], revoked_at__isnull=True)
    assert client.delete(f"/api/keys/{own.pk}", headers=auth).status_code == 403
    assert ApiKey.objects.filter(user=people["member"]).count() == 2
    client.force_login(people["member"])  # the member's own session may do both
    created = client.post("/api/keys", {"label": "x"}, content_type="application/json")
    assert created.status_code == 201
    assert client.delete(f"/api/keys/{own.pk}").status_code == 204


def test_nobody_revokes_anothers_key(client, people):
    staff_key = ApiKey.objects.get(user=people["staff"])
    client.force_login(people["member"])
    assert client.delete(f"/api/keys/{staff_key.pk}").status_code == 404
    assert client.delete("/api/keys/99999999999999999999").status_code == 404
    staff_key.refresh_from_db()
    assert staff_key.active


def test_invalid_label_is_400(client, people):
    auth = {"x-api-key": people["keys"]["staff"]}
    long = client.post(
        "/api/keys", {"label": "x" * 101}, content_type="application/json", headers=auth
    )
    assert long.status_code == 400 and "label" in long.json()
    broken = client.post("/api/keys", b"{", content_type="application/json", headers=auth)
    assert broken.status_code == 400 and "detail" in broken.json()
    form = client.post("/api/keys", {"label": "x"}, headers=auth)  # multipart: not JSON
    assert form.status_code == 415


def test_static_key_acts_for_a_service_user_who_is_not_staff(client, people, settings):
    static = "mlx-a-static-key-for-the-service-user-0123456789"
    settings.MLXLAB = settings.MLXLAB.replace(
        static_api_key_digests=(hashlib.sha256(static.encode()).hexdigest(),)
    )
    auth = {"Authorization": f"Bearer {static}"}
    me = client.get("/api/me", headers=auth).json()
    assert me["username"] == "api-service" and me["api_key"] == "static key"
    assert not User.objects.get(username="api-service").is_staff
    assert client.get("/api/settings/access", headers=auth).status_code == 403
    assert client.get("/api/jobs", headers=auth).status_code == 403
    minted = client.post("/api/keys", {"label": "x"}, content_type="application/json", headers=auth)
    assert minted.status_code == 403


def test_access_settings_for_staff(client, people):
    body = client.get("/api/settings/access", headers={"x-api-key": people["keys"]["staff"]}).json()
    assert body["api_key_required"] is True
    assert body["active_api_keys"] == 2 and body["revoked_api_keys"] == 1
    assert body["cors_allowed_origins"] == []
