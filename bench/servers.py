"""Start and stop the two servers under test, one at a time, on loopback ephemeral ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from draft_model import DRAFT_DIR, DRAFT_NAME

ROOT = Path(__file__).resolve().parent.parent
MODEL_NAME = "smollm2-135m-instruct"
MODEL_DIR = ROOT / "var" / "models" / MODEL_NAME
READY_TIMEOUT = 180.0

# /health's detail, /stats and /engine are for staff. A staff session, made in the lab's fresh
# database before it starts, reads them (a key would close the open API the bench uses); its
# key lands beside the database.
STAFF_SESSION = """
import os
from pathlib import Path
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
user = User.objects.create_user("bench-status", is_staff=True)
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
Path(os.environ["MLXLAB_DB_PATH"]).with_name("staff-session").write_text(session.session_key)
"""
# The staff session of each running server, by its URL (status()).
STATUS_COOKIES: dict[str, dict[str, str]] = {}


@dataclass(frozen=True)
class ServerSpec:
    key: str  # used on the command line (--only) and in file names
    label: str  # used in the table
    model: str  # the model id each server expects in requests
    command: Callable[[int], list[str]]
    is_ready: Callable[[dict], bool]
    env: Callable[[Path], dict[str, str]] = lambda home: {}  # extra variables, given a temp dir
    setup: list[list[str]] = field(default_factory=list)  # run once before starting
    # Cookies that read the server's status, given the temp dir, once setup has run.
    status_cookies: Callable[[Path], dict[str, str]] = lambda home: {}
    cwd: Path = ROOT  # the tree it runs from (bench/ab.py: another commit's checkout)


def mlxlab_env(home: Path) -> dict[str, str]:
    # A fresh database per run, in a throwaway folder, never the developer's one.
    return {
        "MLXLAB_DB_PATH": str(home / "db.sqlite3"),
        "MLXLAB_PROMPT_CACHE_DIR": str(home / "prompt-cache"),
        "MLXLAB_CHECKPOINT_DIR": str(home / "checkpoints"),
        "MLXLAB_MODELS_DIR": str(MODEL_DIR.parent),
        "MLXLAB_DEFAULT_MODEL": MODEL_NAME,
        "MLXLAB_PRELOAD": "1",
    }


def mlxlab_spec(tree: Path = ROOT, label: str = "MLX Lab") -> ServerSpec:
    """MLX Lab from `tree` (this checkout, or another commit's), on this checkout's venv
    and models."""
    manage = [sys.executable, "manage.py"]
    # The server runlab starts; an older commit's tree without it ran plain Daphne.
    server = "mlxlab.httpserver" if (tree / "mlxlab" / "httpserver.py").is_file() else "daphne"
    return ServerSpec(
        key="mlxlab",
        label=label,
        cwd=tree,
        model=MODEL_NAME,
        command=lambda port: [
            *[sys.executable, "-m", server, "-b", "127.0.0.1", "-p", str(port)],
            "mlxlab.asgi:application",
        ],
        is_ready=lambda health: MODEL_NAME in health.get("models_loaded", []),
        env=mlxlab_env,
        setup=[
            [*manage, "migrate", "--noinput", "-v", "0"],
            [*manage, "add_model", str(MODEL_DIR), "--name", MODEL_NAME],
            # The speculative bench's draft model (bench/draft_model.py), made once.
            [sys.executable, str(ROOT / "bench" / "draft_model.py")],
            [*manage, "add_model", str(DRAFT_DIR), "--name", DRAFT_NAME],
            [*manage, "shell", "-c", STAFF_SESSION],
        ],
        status_cookies=lambda home: {"sessionid": (home / "staff-session").read_text().strip()},
    )


def mlx_lm_spec() -> ServerSpec:
    # `python -m mlx_lm.server` is deprecated in favour of this spelling (same server).
    # mlx_lm.server answers /health as soon as its generation thread runs, before the
    # weights are loaded; the unmeasured warm-up request absorbs the load.
    return ServerSpec(
        key="mlx_lm",
        label="mlx_lm.server",
        model="default_model",
        command=lambda port: [
            *[sys.executable, "-m", "mlx_lm", "server", "--model", str(MODEL_DIR)],
            *["--host", "127.0.0.1", "--port", str(port)],
        ],
        is_ready=lambda health: health.get("status") == "ok",
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running(spec: ServerSpec, log_path: Path) -> Iterator[tuple[str, int]]:
    """Yield the base URL and pid of a ready server; always stop it, even on Ctrl-C."""
    home = Path(tempfile.mkdtemp(prefix=f"bench-{spec.key}-"))
    env = {**os.environ, **spec.env(home)}
    process: subprocess.Popen | None = None
    try:
        with open(log_path, "wb") as log:
            for argv in spec.setup:
                subprocess.run(argv, cwd=spec.cwd, env=env, stdout=log, stderr=log, check=True)
            port = free_port()
            # A new session keeps the terminal's Ctrl-C away from the server, so that it is
            # stopped once, by us, in order.
            process = subprocess.Popen(
                spec.command(port), cwd=spec.cwd, env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        STATUS_COOKIES[url] = spec.status_cookies(home)
        wait_until_ready(spec, url, process, log_path)
        yield url, process.pid
    finally:
        if process is not None:
            stop(process)
        shutil.rmtree(home, ignore_errors=True)


def wait_until_ready(spec: ServerSpec, url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{spec.label} exited early (code {process.returncode}); see {log}")
        try:
            if spec.is_ready(status(url, "/health", timeout=2)):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{spec.label} not ready after {READY_TIMEOUT:.0f}s; see {log}")


def status(url: str, path: str, timeout: float = 10) -> dict:
    """`/health`, `/stats` or `/engine` of a running server, read as its staff session."""
    cookies = STATUS_COOKIES.get(url, {})
    return httpx.get(f"{url}{path}", cookies=cookies, timeout=timeout).json()


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
