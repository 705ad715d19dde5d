"""A live lab for the job tests: Daphne and a real Celery worker sharing one database.

The worker is a separate process, started and (for the killed-worker test) killed
and restarted like `make run` would; nothing runs eagerly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import LAB_PASSWORD, LAB_USER, ROOT, LiveServer, start_daphne
from tests.databases import database_env

WORKER_NAME = "jobs-test@localhost"  # fixed, so a restarted worker recognises its jobs


def manage(env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout


@dataclass
class Worker:
    env: dict
    log_path: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "mlxlab", "worker", "--loglevel=INFO",
                 "--without-gossip", "--without-mingle", "--without-heartbeat",
                 "-n", WORKER_NAME],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its pool children die with it
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while "ready." not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Celery worker did not start:\n{self.log()[-3000:]}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """As a crash would: SIGKILL to the worker and its pool, no cleanup."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class JobsLab:
    server: LiveServer
    worker: Worker
    env: dict
    home: Path
    api_key: str
    clients: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self) -> httpx.Client:
        client = httpx.Client(
            base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {self.api_key}"}
        )
        self.clients.append(client)
        return client

    def add_model(self, path: Path, name: str) -> None:
        manage(self.env, "add_model", str(path), "--name", name)

    def wait_job(self, job_id: str, until=("succeeded", "failed", "cancelled"), timeout=600):
        client = self.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = client.get(f"/api/jobs/{job_id}").json()
            if job["status"] in until:
                return job
            time.sleep(0.3)
        pytest.fail(f"job {job_id} still {job['status']}:\n{self.worker.log()[-3000:]}")

    def wait_running(self, job_id: str, min_progress: float = 0.0, timeout=300) -> dict:
        client = self.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = client.get(f"/api/jobs/{job_id}").json()
            if job["status"] == "running" and job["progress"] > min_progress:
                return job
            assert job["status"] in ("queued", "running"), job
            time.sleep(0.2)
        pytest.fail(f"job {job_id} did not start:\n{self.worker.log()[-3000:]}")


def start_jobs_lab(
    home: Path, model_folder: Path, default_model: str, extra_env: dict | None = None
) -> JobsLab:
    env = {
        **os.environ,
        "MLXLAB_VAR_DIR": str(home),
        **({} if "DATABASE_URL" in (extra_env or {}) else database_env(home)),
        "MLXLAB_MODELS_DIR": str(home / "models"),
        "MLXLAB_DEFAULT_MODEL": default_model,
        "MLXLAB_PRELOAD": "0",
        # A killed job process is noticed in seconds, not the default 45.
        "MLXLAB_JOB_HEARTBEAT_SECONDS": "1",
        "MLXLAB_JOB_STALE_SECONDS": "15",
        **(extra_env or {}),  # last: a lab on a database or Redis of the test's choosing
    }
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "add_model", str(model_folder), "--name", default_model)
    user_env = {
        **env,
        "DJANGO_SUPERUSER_USERNAME": LAB_USER,
        "DJANGO_SUPERUSER_PASSWORD": LAB_PASSWORD,
    }
    manage(user_env, "createsuperuser", "--noinput", "--email", "tester@localhost")
    api_key = manage(env, "create_api_key", "--user", LAB_USER, "--label", "tests").strip()
    worker = Worker(env, home / "worker.log")
    worker.start()
    try:
        server = start_daphne(home, env, label="jobs-daphne", wait_for_model=False)
    except BaseException:
        worker.stop()
        raise
    return JobsLab(server, worker, env, home, api_key)
