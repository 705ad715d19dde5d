"""Login throttling (issue 56: none), through django-axes: a username from one address is
locked out after MLXLAB_LOGIN_FAILURE_LIMIT failures, for MLXLAB_LOGIN_LOCKOUT_SECONDS.
The same username from elsewhere, and another username from there, still log in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

ATTACKER, OFFICE = "203.0.113.9", "198.51.100.4"
PASSWORD = "the-admin-password-1"


@pytest.fixture
def people(db) -> None:
    User.objects.create_superuser("admin", "admin@localhost", PASSWORD)
    User.objects.create_user("alice", password="alice-password-1")


def log_in(username: str, password: str, address: str, path: str = "/login/") -> int:
    response = Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})
    return response.status_code


def fail_until_locked(username: str, address: str, path: str = "/login/") -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in(username, "wrong-guess", address, path) == 200  # the form, with its error
    assert log_in(username, "wrong-guess", address, path) == 429  # the last one locks


def test_the_limit_is_the_setting(people):
    assert settings.AXES_FAILURE_LIMIT == settings.MLXLAB.login_failure_limit == 5
    lockout = settings.MLXLAB.login_lockout_seconds
    assert settings.AXES_COOLOFF_TIME.total_seconds() == lockout == 900


def test_failures_lock_that_username_from_that_address_out(people):
    fail_until_locked("admin", ATTACKER)
    assert log_in("admin", PASSWORD, ATTACKER) == 429  # the right password, too late


def test_the_lockout_holds_no_one_else(people):
    fail_until_locked("admin", ATTACKER)
    assert log_in("admin", PASSWORD, OFFICE) == 302  # the admin, from elsewhere
    assert log_in("alice", "alice-password-1", ATTACKER) == 302  # another user, from there


def test_the_admin_site_login_is_throttled_too(people):
    fail_until_locked("admin", ATTACKER, "/admin/login/")
    assert log_in("admin", PASSWORD, ATTACKER, "/admin/login/") == 429
    assert log_in("admin", PASSWORD, ATTACKER) == 429  # the lab's form is the same door


def test_a_lockout_ends_after_the_cool_off_or_when_the_admin_lifts_it(people):
    fail_until_locked("admin", ATTACKER)
    cool_off = timedelta(seconds=settings.MLXLAB.login_lockout_seconds + 1)
    AccessAttempt.objects.update(attempt_time=timezone.now() - cool_off)
    assert log_in("admin", PASSWORD, ATTACKER) == 302

    fail_until_locked("alice", ATTACKER)
    assert log_in("alice", "alice-password-1", ATTACKER) == 429
    reset(username="alice")  # what the admin's "Access attempts" delete and axes_reset do
    assert log_in("alice", "alice-password-1", ATTACKER) == 302
