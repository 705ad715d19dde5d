"""The local admin account made on the first `make run`, when the lab has no user yet."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model

USERNAME = "admin"


def credentials_path(var_dir: Path) -> Path:
    return var_dir / "admin-credentials.txt"


def ensure_first_admin(var_dir: Path) -> tuple[str, str] | None:
    """Create the admin when no user exists; returns (username, password) that one time.

    The password is also written to a file only the owner can read, so it survives a
    scrolled-away terminal; nothing else keeps it.
    """
    users = get_user_model()
    if users.objects.exists():
        return None
    password = secrets.token_urlsafe(15)
    users.objects.create_superuser(USERNAME, email="", password=password)
    path = credentials_path(var_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"username: {USERNAME}\npassword: {password}\n")
    return USERNAME, password
