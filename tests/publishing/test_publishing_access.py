"""Publishing is for staff, with CSRF for browsers; the admin never shows the token."""

from __future__ import annotations

import pytest
from django.test import Client

from publishing.token_store import token_read, token_save


@pytest.fixture
def staff(db, django_user_model):
    return django_user_model.objects.create_user("root", password="pw", is_staff=True,
                                                 is_superuser=True)  # fmt: skip


def test_non_staff_and_anonymous_are_refused(db, django_user_model):
    assert Client().get("/api/settings/hf-token").status_code == 401
    plain = Client()
    plain.force_login(django_user_model.objects.create_user("pleb"))
    answer = plain.get("/api/settings/hf-token")
    assert answer.status_code == 403 and answer.json()["ok"] is False
    assert plain.post("/api/dataset/push", {}, "application/json").status_code == 403


def test_a_browser_session_needs_its_csrf_token(staff):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(staff)
    refused = browser.post("/api/settings/hf-token", {"token": "hf_x"}, "application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
    browser.get("/settings/")  # sets the CSRF cookie, as the page does
    token = browser.cookies["csrftoken"].value
    deleted = browser.delete("/api/settings/hf-token", headers={"X-CSRFToken": token})
    assert deleted.json() == {"ok": True, "hasToken": False}


def test_the_admin_shows_that_a_token_exists_never_the_token(staff, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    token_save("hf_secret_value_123", user=staff, username="tester")
    assert token_read() == "hf_secret_value_123"
    admin = Client()
    admin.force_login(staff)
    listing = admin.get("/admin/publishing/hubtoken/")
    detail = admin.get("/admin/publishing/hubtoken/1/change/")
    assert listing.status_code == detail.status_code == 200
    assert b"tester" in listing.content and b"root" in listing.content
    for page in (listing, detail):
        assert b"hf_secret_value_123" not in page.content
