"""`make run` stops everything it started, however it is stopped: SIGTERM to its whole
process group (systemd, a container runtime), Ctrl-C twice, SIGHUP (a closed terminal),
and SIGKILL to runlab alone. Afterwards no process of the run's session is left, its
port is closed, and the Redis it started (with the connections to it) is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import ROOT, default_model_folder
from tests.databases import database_env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _session_processes(sid: int) -> dict[int, str]:
    """Live processes of session `sid` (zombies aside), with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        state, _, _, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == sid and state != "Z":
            found[int(entry.name)] = command
    return found


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` now, whatever session or group it moved to."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} after {timeout} s")


@pytest.fixture
def lab_env(tmp_path) -> dict:
    env = {
        **os.environ,
        "MLXLAB_VAR_DIR": str(tmp_path),
        **database_env(tmp_path),
        "MLXLAB_MODELS_DIR": str(default_model_folder().parent),
        "MLXLAB_PRELOAD": "0",
        # No Redis answers here: runlab starts its own, which must go with it.
        "REDIS_URL": f"redis://127.0.0.1:{_free_port()}/0",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    return env


def _start(env: dict, port: int, *, via_make: bool, log: Path) -> subprocess.Popen:
    if via_make:
        command = ["make", "run", "HOST=127.0.0.1", f"PORT={port}"]
    else:
        command = [sys.executable, "manage.py", "runlab", "--port", str(port)]
    with log.open("w") as out:
        # A session of its own, as a service manager starts it.
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=out, start_new_session=True
        )


def _up(env: dict, port: int, lab: subprocess.Popen, log: Path) -> redis.Redis:
    """Wait until Daphne answers and the Celery worker holds connections to Redis."""
    broker = redis.Redis.from_url(env["REDIS_URL"])

    def ready() -> bool:
        assert lab.poll() is None, log.read_text()[-3000:]
        try:
            healthy = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            return healthy and len(broker.client_list()) > 1  # the worker's, and ours
        except (httpx.TransportError, redis.ConnectionError):
            return False

    _wait(ready, 120, "the lab did not come up")
    return broker


def _all_gone(lab: subprocess.Popen, ports: tuple[int, ...], log: Path, run: set[int]) -> None:
    """Wait for the whole run to end: its session, every process it had started (`run`,
    wherever they moved) and its ports; whatever is left is killed, and named."""
    sid = lab.pid
    run = run | _descendants(lab.pid)  # a test that failed early took no snapshot

    def left() -> dict[int, str]:
        found = _session_processes(sid)
        return {**found, **{pid: "(left its session)" for pid in run if _alive(pid)}}

    def gone() -> bool:
        return not left() and not any(_listening(p) for p in ports)

    try:
        _wait(gone, 60, "processes or ports of the run were left")
    except AssertionError:
        remaining = left()
        for pid in remaining:  # leave nothing behind for the rest of the suite
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"left running: {remaining}\n{log.read_text()[-3000:]}") from None
    finally:
        if lab.poll() is None:
            lab.kill()
        lab.wait(10)


def _redis_port(env: dict) -> int:
    return int(env["REDIS_URL"].rsplit(":", 1)[1].split("/")[0])


def test_sigterm_to_the_whole_group_of_make_run(lab_env, tmp_path):
    port, log = _free_port(), tmp_path / "run.log"
    lab, run = _start(lab_env, port, via_make=True, log=log), set()
    try:
        _up(lab_env, port, lab, log)
        run = _descendants(lab.pid)
        os.killpg(lab.pid, signal.SIGTERM)  # make and runlab get it, as from systemd
    finally:
        _all_gone(lab, (port, _redis_port(lab_env)), log, run)


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT, signal.SIGINT), (signal.SIGHUP,)],
    ids=["ctrl-c-twice", "sighup"],
)
def test_runlab_stops_everything_on(signals, lab_env, tmp_path):
    port, log = _free_port(), tmp_path / "run.log"
    lab, run = _start(lab_env, port, via_make=False, log=log), set()
    try:
        _up(lab_env, port, lab, log)
        run = _descendants(lab.pid)
        for signum in signals:
            lab.send_signal(signum)
            time.sleep(0.3)
    finally:
        _all_gone(lab, (port, _redis_port(lab_env)), log, run)
    assert lab.returncode == 0, log.read_text()[-3000:]


def test_runlab_killed_alone_takes_its_children_and_model_workers(lab_env, tmp_path):
    env = {**lab_env, "MLXLAB_PRELOAD": "1"}
    subprocess.run(
        [sys.executable, "manage.py", "ensure_default_model"], cwd=ROOT, env=env, check=True
    )
    port, log = _free_port(), tmp_path / "run.log"
    lab, run = _start(env, port, via_make=False, log=log), set()
    try:
        _up(env, port, lab, log)

        def worker_up() -> bool:
            return any("modelworker" in c for c in _session_processes(lab.pid).values())

        _wait(worker_up, 120, "no model worker started")
        run = _descendants(lab.pid)
        os.kill(lab.pid, signal.SIGKILL)  # no handler runs: the children must notice
    finally:
        _all_gone(lab, (port, _redis_port(env)), log, run)
