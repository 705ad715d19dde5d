"""MLXLAB_HTTPS: behind a TLS proxy, Django's deployment check finds nothing to warn of."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def _deploy_check(**environ: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **environ}
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_behind_tls_the_deployment_check_is_clean():
    plain = _deploy_check(MLXLAB_HTTPS="0")
    assert plain.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in plain.stderr + plain.stdout  # HSTS, redirect, the two cookies
    behind_tls = _deploy_check(MLXLAB_HTTPS="1")
    assert behind_tls.returncode == 0, behind_tls.stderr
    assert "no issues" in behind_tls.stdout
