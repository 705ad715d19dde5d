"""Run the whole lab in the foreground: Redis if none answers, a Celery worker, Daphne.

A child that dies is started again (a crash loop stops the lab). SIGINT, SIGTERM or
SIGHUP stops every child this command started, newest first, each with a grace period
and then SIGKILL to its whole process group; a second signal (a second or more after
the first) ends the grace at once.
The handlers only count signals, so however many arrive, and whichever process of
the group gets them first, the stop runs to its end. Each child has a process group
of its own in runlab's session (a terminal's Ctrl-C reaches runlab alone, which stops
them in order) and is sent SIGTERM by the kernel if runlab dies without stopping it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from access.api_keys import keys_exist
from lab.first_admin import credentials_path, ensure_first_admin
from labsettings import lab_settings


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def is_loopback(host: str) -> bool:
    """Only a literal loopback address or `localhost`: any other name may reach a network."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_open_bind(host: str) -> None:
    """Refuse to serve an API without keys beyond this machine, unless explicitly allowed."""
    if is_loopback(host) or keys_exist() or lab_settings.allow_open_network_api:
        return
    raise CommandError(
        f"refusing to listen on {host}: no API key exists, so anyone who can reach it could "
        "use the API. Create one (manage.py create_api_key --user NAME), set MLXLAB_API_KEYS, "
        "or set MLXLAB_ALLOW_OPEN_NETWORK_API=1 to serve it open on purpose."
    )


RESTARTS_PER_MINUTE = 5  # more than this is a crash loop: the lab stops and says why


@dataclass
class Child:
    label: str
    command: list[str]
    process: subprocess.Popen
    restarts: deque = field(default_factory=deque)  # monotonic times of recent restarts

    def may_restart(self, now: float) -> bool:
        while self.restarts and now - self.restarts[0] > 60:
            self.restarts.popleft()
        return len(self.restarts) < RESTARTS_PER_MINUTE


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 10.0  # for each child to stop on SIGTERM before its group is killed
SAME_STOP_SECONDS = 1.0  # signals this close together count as one
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM from the kernel when runlab dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, signum)


class Command(BaseCommand):
    help = "Serve the lab (Daphne) with a Celery worker, starting Redis if none is listening."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true", help="do not start Celery")

    def handle(self, *args, host: str, port: int, no_worker: bool, **options):
        check_open_bind(host)  # before anything starts
        self._first_admin()
        self.children: list[Child] = []
        self.signals = 0  # stop signals received; counted, never raised
        self._last_signal = float("-inf")
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_stop_signal)
        try:
            self._start_children(host, port, no_worker)
            while not self.signals:
                time.sleep(0.2)
                self._restart_the_dead()
        except Exception:  # a child that would not start: stop the others first
            self._stop_children()
            raise
        self._stop_and_exit(0)

    def _on_stop_signal(self, signum, frame) -> None:
        # Only count: stopping the children from inside the handler could wait on a
        # Popen lock that the interrupted code holds (a SIGTERM during child.poll()).
        # A repeat within a second is the same stop: a SIGTERM to `make run`'s group
        # reaches runlab twice, once directly and once forwarded by make.
        now = time.monotonic()
        if now - self._last_signal >= SAME_STOP_SECONDS:
            self.signals += 1
        self._last_signal = now

    def _start_children(self, host: str, port: int, no_worker: bool) -> None:
        if not no_worker:
            self._ensure_redis()
            if self.signals:
                return
            self._spawn(
                "celery worker",
                [sys.executable, "-m", "celery", "-A", "mlxlab", "worker", "--loglevel=INFO",
                 "--concurrency=1", "--without-gossip"],
            )  # fmt: skip
        if self.signals:
            return
        # Daphne, its HTTP held to the body limits and clocks as bytes arrive (httpserver.py).
        daphne = [sys.executable, "-m", "mlxlab.httpserver", "-b", host, "-p", str(port)]
        if settings.MLXLAB.https:
            # Behind the TLS proxy, a client's address is the one the proxy forwards: login
            # throttling counts each client's own, not the proxy's for everyone.
            daphne.append("--proxy-headers")
        self._spawn("daphne", [*daphne, "mlxlab.asgi:application"])
        self.stdout.write(f"MLX Lab on http://{host}:{port}/ (Ctrl-C stops it)")

    def _first_admin(self) -> None:
        created = ensure_first_admin(settings.VAR_DIR)
        if created is None:
            return
        username, password = created
        self.stdout.write(
            f"Created the lab's admin account (shown this once):\n"
            f"  username: {username}\n  password: {password}\n"
            f"  (also in {credentials_path(settings.VAR_DIR)}, readable only by you)"
        )

    def _ensure_redis(self) -> None:
        url = urlparse(settings.REDIS_URL)
        host, port = url.hostname or "127.0.0.1", url.port or 6379
        if _listening(host, port):
            return
        server = shutil.which("redis-server")
        if server is None:
            raise CommandError(
                f"no Redis answers at {host}:{port} and redis-server is not installed: "
                "install Redis (e.g. `apt install redis-server`) or set REDIS_URL"
            )
        # Queued jobs live in Redis: an append-only file under var/ keeps them across a
        # restart, so no job row is left queued with no message to run it.
        folder = Path(settings.VAR_DIR) / "redis"
        folder.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "redis",
            [
                server,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(folder),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
            ],
        )
        for _ in range(50):
            if _listening(host, port) or self.signals:
                return
            time.sleep(0.1)
        raise CommandError(f"redis-server did not start on {host}:{port}")

    def _spawn(self, label: str, command: list[str]) -> Child:
        self.stdout.write(f"starting {label}")
        child = Child(label, command, self._start(command))
        self.children.append(child)
        return child

    @staticmethod
    def _start(command: list[str]) -> subprocess.Popen:
        return subprocess.Popen(command, process_group=0, preexec_fn=_die_with_parent)

    def _restart_the_dead(self) -> None:
        """A killed worker, Redis or Daphne comes back: nothing queued or stored is lost
        (Redis keeps an append-only file, jobs and responses live in the database)."""
        for child in self.children:
            code = child.process.poll()
            if code is None:
                continue
            now = time.monotonic()
            if not child.may_restart(now):
                self.stderr.write(
                    f"{child.label} exited with code {code}, {RESTARTS_PER_MINUTE} restarts "
                    "within a minute: stopping"
                )
                self._stop_and_exit(code or 1)
            self.stderr.write(f"{child.label} exited with code {code}; starting it again")
            child.restarts.append(now)
            child.process = self._start(child.command)

    def _stop_and_exit(self, code: int) -> None:
        self._stop_children()
        sys.exit(code)

    def _stop_children(self) -> None:
        """Newest first (Daphne, the worker, then the Redis they use), each group in turn."""
        self._signals_at_stop = self.signals
        for child in reversed(self.children):
            self._stop_child(child.process)

    def _stop_child(self, process: subprocess.Popen) -> None:
        # The child leads its own group: the group holds what it started (a Celery pool
        # child), which must not outlive it either.
        pgid = process.pid
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while process.poll() is None and time.monotonic() < deadline:
            if self.signals > self._signals_at_stop:  # another signal: no more grace
                break
            time.sleep(0.05)
        _signal_group(pgid, signal.SIGKILL)
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            self.stderr.write(f"process {process.pid} did not die on SIGKILL")
