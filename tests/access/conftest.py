"""A live server that needs API keys: users of each kind, their keys, and a static key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.conftest import DEFAULT_MODEL, ROOT, LiveServer, _manage, start_daphne
from tests.databases import database_env

STATIC_KEY = "mlx-static-test-key-0123456789abcdefghijklmnopqrstuv"

# Run in the server's database. Static keys act for a service user who is not staff.
MAKE_USERS = """
import json
from django.contrib.auth.models import User
from access.api_keys import api_key_create, api_key_revoke
fuzz = User.objects.create_superuser("fuzz", "fuzz@example.com", "fuzz-password")
staff = User.objects.create_user("staffer", is_staff=True)
member = User.objects.create_user("member")
gone = User.objects.create_user("gone")
keys = {
    "fuzz": api_key_create(user=fuzz, label="fuzz")[1],
    "staff": api_key_create(user=staff, label="staff")[1],
    "member": api_key_create(user=member, label="member")[1],
    "revoked": api_key_create(user=member, label="old")[1],
    "inactive": api_key_create(user=gone, label="inactive user")[1],
}
# Rate-limited callers of test_rate_limits_live.py, each a user of its own.
from access.models import UserLimits
for name, limits in {"rpm2": {"rpm": 2}, "rpm1": {"rpm": 1}, "tpm": {"tpm": 5}}.items():
    keys[name] = api_key_create(user=User.objects.create_user(name), **limits)[1]
budget = User.objects.create_user("budget")
UserLimits.objects.create(user=budget, monthly_tokens=1)
keys["budget"] = api_key_create(user=budget)[1]
keys["usage"] = api_key_create(user=User.objects.create_user("usage"))[1]
api_key_revoke(key=member.api_keys.get(label="old"))
gone.is_active = False
gone.save()
print(json.dumps(keys))
"""


@dataclass
class SecuredServer:
    server: LiveServer
    # fuzz (a superuser), staff, member, revoked, inactive, static; and for the limits:
    # rpm2, rpm1 and tpm (5 a window), budget (1 token a month), usage (no limit)
    keys: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="session")
def secured_server(tmp_path_factory, model_folder, hub, redis_url) -> SecuredServer:
    """Keys exist: /v1 needs one. Tiny generations: 2 tokens at most, by default and by cap."""
    home = tmp_path_factory.mktemp("secured")
    env = {
        **os.environ,
        **database_env(home),
        # Its prompt cache and checkpoints in its own folder, not the checkout's var/: kept
        # there, a run's cache answered the next run's requests under the same user id
        # (they restart at 1 in each test database), and the scoping test saw its prefix.
        "MLXLAB_VAR_DIR": str(home),
        "MLXLAB_MODELS_DIR": str(model_folder.parent),
        "MLXLAB_DEFAULT_MODEL": DEFAULT_MODEL,
        "MLXLAB_PRELOAD": "1",
        "MLXLAB_API_KEYS": STATIC_KEY,
        "MLXLAB_DEFAULT_MAX_TOKENS": "2",
        "MLXLAB_MAX_TOKENS_LIMIT": "2",
        "MLXLAB_MAX_BATCH_SIZE": "2",
        # Small /v1 bodies: a fuzzed prompt of a few KiB would take a minute to prefill here.
        "MLXLAB_MAX_REQUEST_BYTES": "2048",
        # Rate limits count in this Redis, over windows short enough for an SDK's retry.
        "REDIS_URL": redis_url,
        "MLXLAB_RATE_LIMIT_WINDOW_SECONDS": "3",
        # Hub searches and update checks go to the stand-in (this machine has no Hub).
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    _manage(env, "migrate", "--noinput", "-v", "0")
    _manage(env, "add_model", str(model_folder), "--name", DEFAULT_MODEL)
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", MAKE_USERS],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    keys = {**json.loads(made.stdout.strip().splitlines()[-1]), "static": STATIC_KEY}
    server = start_daphne(home, env, "secured")
    try:
        yield SecuredServer(server, keys)
    finally:
        server.stop()
