"""Two web replicas, real Daphne processes on two ports, behave as one lab.

They share one PostgreSQL database, one Redis (channel layer and Celery broker), one
Celery worker and one model worker, which both name in MLXLAB_WORKERS: the model is
loaded once, not once per replica. A Responses chain started on one continues on the
other, a lab conversation streams on either, a job's progress reaches a browser on
either, and a key revoked on one is refused by the other at once.

Skipped, with the reason, when no PostgreSQL answers (SQLite is not for two processes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from urllib.parse import urlparse

import httpx
import pytest
import redis
from playwright.sync_api import expect

from tests.browser import log_in
from tests.conftest import DEFAULT_MODEL, ROOT, _free_port, start_daphne
from tests.live_jobs import start_jobs_lab
from tests.test_postgres import ADMIN_URL

SECRET = "replicas-test-secret-0123456789"


@pytest.fixture(scope="module")
def shared_database() -> str:
    import psycopg

    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"no PostgreSQL answers at {ADMIN_URL} (SQLite is not for two web "
                    f"processes): {error}".strip())  # fmt: skip
    name = f"mlxlab_replicas_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="module")
def model_worker(tmp_path_factory, model_folder):
    """The one model worker both replicas use (here on loopback TCP, with the secret)."""
    home = tmp_path_factory.mktemp("replica-worker")
    address = f"tcp://127.0.0.1:{_free_port()}"
    log = home / "worker.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "modelworker", "--model", DEFAULT_MODEL,
             "--path", str(model_folder), "--listen", address],
            cwd=ROOT, env={**os.environ, "MLXLAB_WORKER_SECRET": SECRET},
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while f"serving at {address}" not in log.read_text(errors="replace"):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield address, process
    finally:
        process.terminate()
        process.wait(15)


class Replicas:
    def __init__(self, lab, other) -> None:
        self.lab, self.a, self.b = lab, lab.server, other
        self.key = lab.api_key

    def client(self, server) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=server.url, timeout=120, headers=headers)


@pytest.fixture(scope="module")
def replicas(shared_database, model_worker, tmp_path_factory, model_folder):
    address, _ = model_worker
    # A Redis database of its own: the session's job workers must not take its jobs.
    broker = urlparse(os.environ["REDIS_URL"])._replace(path="/13").geturl()
    redis.Redis.from_url(broker).flushdb()
    home = tmp_path_factory.mktemp("replicas")
    lab = start_jobs_lab(
        home, model_folder, DEFAULT_MODEL,
        extra_env={"DATABASE_URL": shared_database, "REDIS_URL": broker,
                   "MLXLAB_WORKERS": f"{DEFAULT_MODEL}={address}",
                   "MLXLAB_WORKER_SECRET": SECRET, "MLXLAB_PRELOAD": "1"},
    )  # fmt: skip
    other = None
    try:
        other = start_daphne(home, lab.env, label="replica-b", wait_for_model=False)
        yield Replicas(lab, other)
    finally:
        for client in lab.clients:
            client.close()
        if other is not None:
            other.stop()
        lab.server.stop()
        lab.worker.stop()


def test_the_replicas_share_one_model_worker(replicas, model_worker):
    _, process = model_worker
    for server in (replicas.a, replicas.b):
        with replicas.client(server) as client:
            reply = client.post(
                "/v1/completions",
                json={"model": DEFAULT_MODEL, "prompt": "Once upon a time", "max_tokens": 4},
            )
            assert reply.status_code == 200, reply.text
            (worker,) = client.get("/engine").json()["workers"]
        assert worker["remote"] is True and worker["pid"] == process.pid


def test_a_responses_chain_started_on_one_replica_continues_on_the_other(replicas):
    with replicas.client(replicas.a) as a, replicas.client(replicas.b) as b:
        first = a.post(
            "/v1/responses",
            json={"model": DEFAULT_MODEL, "input": "Name a colour.", "max_output_tokens": 4},
        )
        assert first.status_code == 200, first.text
        follow = b.post(
            "/v1/responses",
            json={"model": DEFAULT_MODEL, "input": "Another?", "max_output_tokens": 4,
                  "previous_response_id": first.json()["id"]},
        )  # fmt: skip
        assert follow.status_code == 200, follow.text
        assert follow.json()["usage"]["input_tokens"] > first.json()["usage"]["input_tokens"]
        # Each replica finds the other's stored response.
        assert b.get(f"/v1/responses/{first.json()['id']}").json()["id"] == first.json()["id"]
        items = a.get(f"/v1/responses/{follow.json()['id']}/input_items").json()["data"]
        assert [item["content"] for item in items] == ["Another?"]


def test_a_key_revoked_on_one_replica_is_refused_by_the_other_at_once(replicas):
    with replicas.client(replicas.a) as a:
        made = a.post("/api/keys", json={"label": "replica-key"})
        assert made.status_code == 201, made.text
        key = made.json()
        headers = {"Authorization": f"Bearer {key['key']}"}
        assert httpx.get(f"{replicas.b.url}/v1/models", headers=headers).status_code == 200
        assert a.delete(f"/api/keys/{key['id']}").status_code in (200, 204)
    # No cache of keys in either process: the very next request is refused.
    assert httpx.get(f"{replicas.b.url}/v1/models", headers=headers).status_code == 401
    assert httpx.get(f"{replicas.a.url}/v1/models", headers=headers).status_code == 401


def _chat(page, text: str) -> None:
    page.fill("#param-max_tokens", "6")
    page.fill("#composer", text)
    page.click("#send-button")


# A reply on a shared 2-core machine can take longer than expect()'s own 5 s default.
REPLY = 120_000


def test_a_lab_conversation_streams_on_either_replica(replicas, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        log_in(page, replicas.a.url)
        _chat(page, "Name a colour.")
        replies = page.locator(".message[data-role=assistant]")
        expect(replies.last).to_have_attribute("data-id", re.compile(r"\d+"), timeout=REPLY)
        expect(page).to_have_url(re.compile(r"/\?c=\d+$"), timeout=REPLY)
        conversation = page.url.rsplit("=", 1)[1]

        # The same browser on the other replica: the session (in the shared database)
        # holds, and the conversation goes on there.
        page.goto(f"{replicas.b.url}/?c={conversation}")
        expect(replies).to_have_count(1, timeout=REPLY)
        _chat(page, "Another one?")
        expect(replies).to_have_count(2, timeout=REPLY)
        expect(replies.last).to_have_attribute("data-id", re.compile(r"\d+"), timeout=REPLY)
        expect(page.locator("#chat-error")).to_be_hidden()
    finally:
        context.close()
    with replicas.client(replicas.a) as a:
        messages = a.get(f"/api/conversations/{conversation}").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


def test_job_progress_reaches_a_browser_on_either_replica(replicas, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    frames: dict[str, list[dict]] = {"a": [], "b": []}
    try:
        pages = {}
        for name, server in (("a", replicas.a), ("b", replicas.b)):
            page = pages[name] = context.new_page()
            page.on("websocket", lambda ws, name=name: ws.on(
                "framereceived", lambda frame: frames[name].append(json.loads(frame))))  # fmt: skip
            if name == "a":
                log_in(page, server.url)
            page.goto(f"{server.url}/jobs/")
        time.sleep(1)  # both list sockets open before the job exists
        lines = "".join(
            json.dumps({"messages": [{"role": "user", "content": f"Q{i}?"},
                                     {"role": "assistant", "content": "A."}]}) + "\n"
            for i in range(10)
        )  # fmt: skip
        with replicas.client(replicas.a) as a:
            upload = a.post("/api/datasets/uploads", files={"file": ("c.jsonl", lines)})
            assert upload.status_code == 201, upload.text
            made = a.post("/api/jobs", json={"kind": "dataset", "params": {
                "format": "chat", "source": {"upload": upload.json()["id"]},
                "split": {"train": 0.8, "valid": 0.2, "test": 0}}})  # fmt: skip
            assert made.status_code == 202, made.text
        job_id = made.json()["id"]
        assert replicas.lab.wait_job(job_id)["status"] == "succeeded"

        def statuses(name: str) -> list[str]:
            job = [f["job"] for f in frames[name] if f.get("job", {}).get("id") == job_id]
            return [j["status"] for j in job]

        deadline = time.monotonic() + 30  # the last frame may trail the database a little
        while not all("succeeded" in statuses(n) for n in frames) and time.monotonic() < deadline:
            pages["a"].wait_for_timeout(100)
    finally:
        context.close()
    # Each replica's own socket heard the job move, from the worker through Redis.
    for name in ("a", "b"):
        assert "running" in statuses(name) and "succeeded" in statuses(name), (name, frames)
