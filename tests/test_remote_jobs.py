"""A Celery worker on another host (a network namespace) runs the web tier's jobs.

The web tier (Daphne, here) and the job host share PostgreSQL and Redis over the network,
and the shared folder (MLXLAB_MODELS_DIR, MLXLAB_ARTIFACTS_DIR, MLXLAB_UPLOADS_DIR) at one
path on both, as an NFS mount would be; each keeps its own MLXLAB_VAR_DIR. A quantize job
run there yields a model that chat then serves here; a dataset job reads a file uploaded
here. The job host reaches PostgreSQL, which listens on loopback only, through a TCP relay
on this host's end of the veth pair, as it would reach a database host.

Skipped, with the reason, when no PostgreSQL answers or no namespace can be made.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, ROOT, _free_port, _listening, _manage, start_daphne
from tests.hosts import hosts_or_skip, new_host, unfence
from tests.test_postgres import ADMIN_URL


class Relay:
    """Forwards TCP from `listen` to `target` (host, port pairs), on a thread of its own."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen, self.target = listen, target
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, *self.listen))
        started.set()
        self.loop.run_forever()

    async def _serve(self, reader, writer) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)

        async def pipe(source, sink) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    def stop(self) -> None:
        async def close() -> None:  # the open connections too, before the loop stops
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _database() -> tuple[str, str]:
    import psycopg

    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"no PostgreSQL answers at {ADMIN_URL}: {error}".strip())
    name = f"mlxlab_jobhost_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return name, ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def _drop(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class JobHostLab:
    def __init__(self, server, env: dict, key: str, worker_log) -> None:
        self.server, self.env, self.worker_log = server, env, worker_log
        self.client = httpx.Client(
            base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {key}"}
        )

    def ran_there(self, job_id: str) -> bool:
        """The job host's Celery worker logged the task (its id is the job's) as done; the
        line may trail the job's own state in the database a little."""
        deadline = time.monotonic() + 15
        while f"[{job_id}] succeeded" not in self.worker_log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def wait_job(self, job_id: str, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.client.get(f"/api/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            time.sleep(0.3)
        pytest.fail(f"job {job_id} still {job['status']}:\n{self.worker_log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def job_host_lab(tmp_path_factory, model_folder):
    hosts_or_skip()
    name, database_url = _database()
    home = tmp_path_factory.mktemp("job-host")
    shared = home / "shared"  # the NFS mount, at one path on both hosts
    host = new_host("jobs")
    stack = []
    try:
        # Redis for both hosts: on loopback for the web tier, on the veth for the job host.
        redis_port = _free_port()
        redis = subprocess.Popen(
            [shutil.which("redis-server"), "--bind", "127.0.0.1", host.gateway,
             "--port", str(redis_port), "--save", "", "--appendonly", "no",
             "--protected-mode", "no"],  # bound to loopback and the veth alone
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        stack.append(lambda: (redis.terminate(), redis.wait(10)))
        while not _listening("127.0.0.1", redis_port):
            assert redis.poll() is None, "redis-server did not start"
            time.sleep(0.05)
        pg_port = _free_port()
        relay = Relay((host.gateway, pg_port), ("127.0.0.1", 5432))
        stack.append(relay.stop)

        common = {
            **os.environ,
            "MLXLAB_MODELS_DIR": str(shared / "models"),
            "MLXLAB_ARTIFACTS_DIR": str(shared / "artifacts"),
            "MLXLAB_UPLOADS_DIR": str(shared / "uploads"),
            "MLXLAB_DEFAULT_MODEL": DEFAULT_MODEL,
            "MLXLAB_PRELOAD": "0",
            "MLXLAB_JOB_HEARTBEAT_SECONDS": "1",
        }
        web_env = {**common, "MLXLAB_VAR_DIR": str(home / "web"), "DATABASE_URL": database_url,
                   "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}  # fmt: skip
        job_env = {
            **common,
            "MLXLAB_VAR_DIR": str(home / "job-host"),
            "DATABASE_URL": database_url.replace("127.0.0.1:5432", f"{host.gateway}:{pg_port}"),
            "REDIS_URL": f"redis://{host.gateway}:{redis_port}/0",
        }
        _manage(web_env, "migrate", "--noinput", "-v", "0")
        _manage(web_env, "add_model", str(model_folder), "--name", DEFAULT_MODEL)
        _manage({**web_env, "DJANGO_SUPERUSER_USERNAME": "tester",
                 "DJANGO_SUPERUSER_PASSWORD": "tester-password-1"},
                "createsuperuser", "--noinput", "--email", "t@localhost")  # fmt: skip
        key = subprocess.run(
            [sys.executable, "manage.py", "create_api_key", "--user", "tester"],
            cwd=ROOT, env=web_env, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip

        worker_log = home / "celery.log"
        worker = host.popen(
            [sys.executable, "-m", "celery", "-A", "mlxlab", "worker", "--loglevel=INFO",
             "--concurrency=1", "--without-gossip", "--without-mingle", "-n", "jobs@job-host"],
            log=worker_log, env=job_env, cwd=ROOT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "ready." not in worker_log.read_text(errors="replace"):
            assert worker.poll() is None and time.monotonic() < deadline, worker_log.read_text()
            time.sleep(0.2)
        server = start_daphne(home, web_env, "job-host-daphne", wait_for_model=False)
        stack.append(server.stop)
        lab = JobHostLab(server, web_env, key, worker_log)
        stack.append(lab.client.close)
        yield lab
    finally:
        for undo in reversed(stack):
            undo()
        host.down()
        unfence()
        _drop(name)


def test_a_quantize_job_run_on_another_host_yields_a_model_chat_serves_here(job_host_lab):
    lab = job_host_lab
    answer = lab.client.post(
        "/api/jobs",
        json={"kind": "quantize",
              "params": {"model": DEFAULT_MODEL, "name": "smol-q8-remote", "bits": 8}},
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    job = lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", (job["error"], lab.worker_log.read_text()[-2000:])
    # It ran there: the job host's worker took it, and wrote into the shared folder.
    assert lab.ran_there(job["id"])
    assert job["artifact_path"].startswith(lab.env["MLXLAB_ARTIFACTS_DIR"])
    reply = lab.client.post(
        "/v1/chat/completions",
        json={"model": "smol-q8-remote", "max_tokens": 8, "temperature": 0,
              "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert "Paris" in reply.json()["choices"][0]["message"]["content"]


def test_a_dataset_job_on_another_host_reads_a_file_uploaded_here(job_host_lab):
    lab = job_host_lab
    lines = "".join(
        json.dumps({"messages": [{"role": "user", "content": f"Q{i}?"},
                                 {"role": "assistant", "content": "A."}]}) + "\n"
        for i in range(10)
    )  # fmt: skip
    upload = lab.client.post("/api/datasets/uploads", files={"file": ("c.jsonl", lines)})
    assert upload.status_code == 201, upload.text
    answer = lab.client.post("/api/jobs", json={"kind": "dataset", "params": {
        "format": "chat", "source": {"upload": upload.json()["id"]},
        "split": {"train": 0.8, "valid": 0.2, "test": 0}}})  # fmt: skip
    assert answer.status_code == 202, answer.text
    job = lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", (job["error"], lab.worker_log.read_text()[-2000:])
    assert job["result"]["counts"] == {"train": 8, "valid": 2, "test": 0}
    assert lab.ran_there(job["id"])
