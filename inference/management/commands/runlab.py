"""Run the whole lab in the foreground: Redis if none answers, a Celery worker, Daphne.

SIGINT or SIGTERM stops every child this command started, newest first.
"""

from __future__ import annotations

import ipaddress
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.api_keys import keys_exist
from lab.first_admin import credentials_path, ensure_first_admin


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
    if is_loopback(host) or keys_exist() or settings.MLXLAB["ALLOW_OPEN_NETWORK_API"]:
        return
    raise CommandError(
        f"refusing to listen on {host}: no API key exists, so anyone who can reach it could "
        "use the API. Create one (manage.py create_api_key --user NAME), set MLXLAB_API_KEYS, "
        "or set MLXLAB_ALLOW_OPEN_NETWORK_API=1 to serve it open on purpose."
    )


class Terminated(Exception):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


def _terminated(signum, frame) -> None:
    # Only raise here: stopping the children from inside the handler could wait on a
    # Popen lock that the interrupted code holds (a SIGTERM during child.poll()).
    raise Terminated()


class Command(BaseCommand):
    help = "Serve the lab (Daphne) with a Celery worker, starting Redis if none is listening."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true", help="do not start Celery")

    def handle(self, *args, host: str, port: int, no_worker: bool, **options):
        check_open_bind(host)  # before anything starts
        self._first_admin()
        self.children: list[subprocess.Popen] = []
        signal.signal(signal.SIGTERM, _terminated)
        try:
            if not no_worker:
                self._ensure_redis()
                self._spawn(
                    "celery worker",
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "mlxlab",
                        "worker",
                        "--loglevel=INFO",
                        "--concurrency=1",
                        "--without-gossip",
                    ],
                )
            self._spawn(
                "daphne",
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    host,
                    "-p",
                    str(port),
                    "mlxlab.asgi:application",
                ],
            )
            self.stdout.write(f"MLX Lab on http://{host}:{port}/ (Ctrl-C stops it)")
            while all(child.poll() is None for child in self.children):
                time.sleep(0.5)
            failed = next(child for child in self.children if child.poll() is not None)
            self.stderr.write(f"{failed.args} exited with code {failed.returncode}; stopping")
            self._stop_and_exit(failed.returncode or 1)
        except (KeyboardInterrupt, Terminated):
            self._stop_and_exit(0)

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
            if _listening(host, port):
                return
            time.sleep(0.1)
        raise CommandError(f"redis-server did not start on {host}:{port}")

    def _spawn(self, label: str, command: list[str]) -> subprocess.Popen:
        self.stdout.write(f"starting {label}")
        child = subprocess.Popen(command, start_new_session=True)
        self.children.append(child)
        return child

    def _stop_and_exit(self, code: int) -> None:
        for child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for child in reversed(self.children):
            try:
                child.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(code)
