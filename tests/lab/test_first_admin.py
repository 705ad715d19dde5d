"""The first run's admin account: made once, shown once, kept owner-only."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys

from django.contrib.auth import authenticate
from django.test import RequestFactory

from lab.first_admin import credentials_path, ensure_first_admin
from tests.conftest import ROOT
from tests.databases import database_env


def test_made_once_with_an_owner_only_file(db, tmp_path):
    username, password = ensure_first_admin(tmp_path)
    path = credentials_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == f"username: {username}\npassword: {password}\n"
    # With a request, as a login has one (login throttling reads its address).
    user = authenticate(RequestFactory().post("/login"), username=username, password=password)
    assert user is not None and user.is_staff and user.is_superuser
    assert len(password) >= 20
    assert ensure_first_admin(tmp_path) is None  # a user exists: nothing new, nothing shown


def test_runlab_prints_the_account_once(tmp_path):
    env = {
        **os.environ,
        "MLXLAB_VAR_DIR": str(tmp_path),
        **database_env(tmp_path),
        "MLXLAB_PRELOAD": "0",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )

    def first_lines() -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        lab = subprocess.Popen(
            [sys.executable, "manage.py", "runlab", "--no-worker", "--port", str(port)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            lines = []
            for line in lab.stdout:
                lines.append(line)
                if line.startswith("MLX Lab on http://"):
                    return "".join(lines)
            raise AssertionError(f"runlab stopped early: {lines}")
        finally:
            lab.terminate()
            lab.wait(30)

    shown = first_lines()
    password = re.search(r"password: (\S+)", shown).group(1)
    assert "username: admin" in shown
    assert f"password: {password}" in credentials_path(tmp_path).read_text()
    assert "password" not in first_lines()  # the second run shows nothing
