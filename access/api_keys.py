"""API keys: create, revoke, and check the key a request presents.

A key is `mlx-` and 43 URL-safe characters (256 random bits). Only its SHA-256
digest is stored. A slow password hash (PBKDF2, argon2) exists to stretch
low-entropy passwords; a 256-bit random key cannot be guessed whatever the hash
speed, and a fast hash keeps each request's check cheap on a small CPU.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils import timezone

from labsettings import lab_settings

from .models import ApiKey

KEY_PREFIX = "mlx-"
DISPLAY_CHARS = 12  # "mlx-" and 8 characters: enough to tell keys apart, useless to guess
LAST_USED_GRANULARITY = timedelta(minutes=1)  # at most one write per key and minute


def key_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def api_key_assign_secret(key: ApiKey) -> str:
    """Give an unsaved key its secret; returns the only copy of the raw key."""
    raw = _new_secret()
    key.prefix = raw[:DISPLAY_CHARS]
    key.digest = key_digest(raw)
    return raw


def api_key_create(
    *, user: User, label: str = "", rpm: int | None = None, tpm: int | None = None
) -> tuple[ApiKey, str]:
    """A new key for `user`: the saved row and the raw key, shown once and never again.
    `rpm` and `tpm` are its own rate limits (None: the server's default)."""
    key = ApiKey(user=user, label=label, rpm=rpm, tpm=tpm)
    raw = api_key_assign_secret(key)
    key.save()
    return key, raw


def api_key_revoke(*, key: ApiKey) -> ApiKey:
    """Revoke a key (kept, so revoking the last key does not reopen the API)."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def static_key_digests() -> tuple[str, ...]:
    """Digests of `MLXLAB_API_KEYS`, hashed when settings load."""
    return lab_settings.static_api_key_digests


def keys_exist() -> bool:
    """Whether /v1 needs a key: any key row (even revoked) or any static key."""
    return bool(static_key_digests()) or ApiKey.objects.exists()


async def akeys_exist() -> bool:
    return bool(static_key_digests()) or await ApiKey.objects.aexists()


def presented_key(request: HttpRequest) -> str | None:
    """The key in `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic), if any."""
    authorization = request.headers.get("Authorization", "")
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() == "bearer" and credential.strip():
        return credential.strip()
    header = request.headers.get("x-api-key", "").strip()
    return header or None


@dataclass(frozen=True)
class KeyCheck:
    """What a presented key turned out to be."""

    ok: bool
    reason: str = ""  # why not, for the 401's message
    key: ApiKey | None = None  # the row, for database keys
    static: bool = False

    @property
    def label(self) -> str:
        return "static key" if self.static else (self.key.prefix if self.key else "")


def service_user() -> User:
    """The user static keys act for: not staff, no password, created on first use
    (MLXLAB_STATIC_KEY_USER). A static key is a shared secret in the environment, so it
    gets no more than a member's rights: no jobs, no publishing, no keys."""
    user, _ = User.objects.get_or_create(
        username=lab_settings.static_key_user,
        defaults={"is_staff": False, "password": make_password(None)},
    )
    return user


def check_key(raw: str) -> KeyCheck:
    """Check a presented key against the database and the static keys (blocking)."""
    digest = key_digest(raw)
    # The lookup is by digest, so its timing tells nothing about the raw key; the
    # static keys are compared in constant time all the same.
    if any(hmac.compare_digest(digest, known) for known in static_key_digests()):
        return KeyCheck(ok=True, static=True)
    key = ApiKey.objects.select_related("user").filter(digest=digest).first()
    if key is None or not hmac.compare_digest(key.digest, digest):
        return KeyCheck(ok=False, reason="Incorrect API key provided.")
    if key.revoked_at is not None:
        return KeyCheck(ok=False, reason="This API key has been revoked.", key=key)
    if not key.user.is_active:
        return KeyCheck(ok=False, reason="This API key's user is inactive.", key=key)
    _touch(key)
    return KeyCheck(ok=True, key=key)


acheck_key = sync_to_async(check_key)


def key_user(check: KeyCheck) -> User | None:
    """The user a valid key acts for: its owner, or the service user for static keys."""
    if check.key is not None:
        return check.key.user
    return service_user() if check.static else None


def _touch(key: ApiKey) -> None:
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_GRANULARITY:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
