"""API key services, the create_api_key command and the admin pages."""

from __future__ import annotations

import hashlib
import re
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from access.api_keys import api_key_create, check_key, keys_exist
from access.models import ApiKey

KEY_PATTERN = re.compile(r"mlx-[A-Za-z0-9_-]{43}")


@pytest.fixture
def member(db) -> User:
    return User.objects.create_user("member")


def test_only_a_digest_and_a_prefix_are_stored(member):
    key, raw = api_key_create(user=member, label="laptop")
    assert KEY_PATTERN.fullmatch(raw)
    stored = ApiKey.objects.values().get(pk=key.pk)
    assert raw not in {str(value) for value in stored.values()}
    assert stored["digest"] == hashlib.sha256(raw.encode()).hexdigest()
    assert stored["prefix"] == raw[:12]


def test_keys_are_unique_and_random(member):
    raws = {api_key_create(user=member)[1] for _ in range(20)}
    assert len(raws) == 20


def test_check_key_and_last_used(member):
    key, raw = api_key_create(user=member)
    assert keys_exist()
    assert key.last_used_at is None
    assert check_key(raw).ok and check_key(raw).key.user == member
    first = ApiKey.objects.get(pk=key.pk).last_used_at
    assert first is not None
    check_key(raw)  # within a minute: no second write
    assert ApiKey.objects.get(pk=key.pk).last_used_at == first
    assert not check_key(raw + "x").ok and not check_key("").ok


def test_command_prints_the_key_once(member):
    out, err = StringIO(), StringIO()
    call_command("create_api_key", "--user", "member", "--label", "ci", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert KEY_PATTERN.fullmatch(raw)
    key = ApiKey.objects.get(user=member)
    assert key.label == "ci" and check_key(raw).key == key
    assert raw not in err.getvalue() and key.prefix in err.getvalue()


def test_command_refuses_an_unknown_user_unless_asked(db):
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("create_api_key", "--user", "ghost", stdout=StringIO())
    assert not User.objects.filter(username="ghost").exists()
    out = StringIO()
    call_command(
        "create_api_key", "--user", "ghost", "--create-user", stdout=out, stderr=StringIO()
    )
    ghost = User.objects.get(username="ghost")
    assert not ghost.has_usable_password()
    assert check_key(out.getvalue().strip()).key.user == ghost


def test_admin_creates_a_key_and_shows_it_once(admin_client, member):
    response = admin_client.post(
        "/admin/access/apikey/add/", {"user": member.pk, "label": "from admin"}, follow=True
    )
    assert response.status_code == 200
    shown = KEY_PATTERN.findall(response.content.decode())
    assert len(shown) == 1 and check_key(shown[0]).key.label == "from admin"
    listing = admin_client.get("/admin/access/apikey/").content.decode()
    assert shown[0][:12] in listing and shown[0] not in listing
    key = ApiKey.objects.get(label="from admin")
    assert (
        key.digest
        not in admin_client.get(f"/admin/access/apikey/{key.pk}/change/").content.decode()
    )


def test_admin_revoke_action(admin_client, member):
    key, raw = api_key_create(user=member)
    response = admin_client.post(
        "/admin/access/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
        follow=True,
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.revoked_at is not None and not check_key(raw).ok


def test_admin_needs_staff(client, member):
    member.set_password("pw-member-123")
    member.save()
    client.force_login(member)
    response = client.get("/admin/access/apikey/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
