"""`make run` keeps the lab up: a child that dies is started again, and stopping the lab
stops every child, restarted ones included."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from tests.conftest import ROOT
from tests.databases import database_env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"nothing healthy at {url} after {timeout} s")


def test_a_killed_child_is_started_again(tmp_path):
    env = {
        **os.environ,
        "MLXLAB_VAR_DIR": str(tmp_path),
        **database_env(tmp_path),
        "MLXLAB_PRELOAD": "0",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    port = _free_port()
    lab = subprocess.Popen(
        [sys.executable, "manage.py", "runlab", "--no-worker", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url)
        [daphne] = _children(lab.pid)
        os.kill(daphne, signal.SIGKILL)
        _wait_healthy(url)
        [again] = _children(lab.pid)
        assert again != daphne
    finally:
        lab.terminate()
        lab.wait(30)
    assert "daphne exited with code -9; starting it again" in lab.stderr.read()
    assert lab.returncode == 0
    assert not _alive(again), "the restarted daphne outlived the lab"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
