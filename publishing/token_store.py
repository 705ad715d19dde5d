"""The Hugging Face token, encrypted with Fernet (cryptography) and kept in the database.

The key comes from MLXLAB_HF_TOKEN_KEY, or from a key file created on first use with
owner-only permissions; the token itself is never returned, logged or put in a job's
parameters: the worker reads it here when it pushes.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from labsettings import lab_settings

from .models import HubToken


class TokenUnavailable(RuntimeError):
    """No token is saved, or it can no longer be decrypted (the key changed)."""


def _key_file() -> Path:
    return Path(settings.VAR_DIR) / "hf_token.key"


def _fernet() -> Fernet:
    if key := lab_settings.hf_token_key:
        return Fernet(key.encode())
    path = _key_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(Fernet.generate_key())
    return Fernet(path.read_bytes().strip())


def token_save(token: str, *, user, username: str = "") -> HubToken:
    record, _ = HubToken.objects.update_or_create(
        pk=1,
        defaults={
            "ciphertext": _fernet().encrypt(token.encode()),
            "set_by": user,
            "username": username,
        },
    )
    return record


def token_exists() -> bool:
    return HubToken.objects.filter(pk=1).exists()


def token_delete() -> bool:
    deleted, _ = HubToken.objects.filter(pk=1).delete()
    return bool(deleted)


def token_read() -> str:
    record = HubToken.objects.filter(pk=1).first()
    if record is None:
        raise TokenUnavailable("no Hugging Face token is saved: add one in the lab's settings")
    try:
        return _fernet().decrypt(bytes(record.ciphertext)).decode()
    except InvalidToken:
        raise TokenUnavailable(
            "the saved Hugging Face token cannot be decrypted (was the key changed?): save it again"
        ) from None
