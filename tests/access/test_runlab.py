"""runlab will not serve an API without keys beyond loopback, unless told to."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from django.core.management import CommandError

from access.api_keys import api_key_create
from mlxlab.management.commands.runlab import check_open_bind, is_loopback
from tests.conftest import ROOT
from tests.databases import database_env


def test_loopback_addresses():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.2", "lab.example", ""]))


def test_refuses_without_keys_and_starts_nothing(tmp_path):
    env = {**os.environ, **database_env(tmp_path), "MLXLAB_PRELOAD": "0"}
    env.pop("MLXLAB_API_KEYS", None)
    env.pop("MLXLAB_ALLOW_OPEN_NETWORK_API", None)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run(
        [*manage, "runlab", "--host", "0.0.0.0", "--port", str(port)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0: no API key exists" in result.stderr
    assert "starting" not in result.stdout  # no Redis, worker or Daphne was started
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


def test_allowed_with_a_key_or_the_setting(db, settings, django_user_model):
    with pytest.raises(CommandError):
        check_open_bind("0.0.0.0")
    check_open_bind("127.0.0.1")
    settings.MLXLAB = settings.MLXLAB.replace(allow_open_network_api=True)
    check_open_bind("0.0.0.0")
    settings.MLXLAB = settings.MLXLAB.replace(allow_open_network_api=False)
    api_key_create(user=django_user_model.objects.create_user("owner"))
    check_open_bind("0.0.0.0")
