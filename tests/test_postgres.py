"""The lab on PostgreSQL (DATABASE_URL): migrations, and a real Daphne and Celery worker
over one PostgreSQL database, through the same API calls that run on SQLite elsewhere.

Skipped, with the reason, when no PostgreSQL answers at MLXLAB_TEST_POSTGRES_URL
(default: the loopback server, user postgres).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from urllib.parse import urlparse

import httpx
import pytest
import redis

from tests.conftest import DEFAULT_MODEL, ROOT
from tests.live_jobs import start_jobs_lab

ADMIN_URL = os.environ.get(
    "MLXLAB_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="module")
def database_url() -> str:
    """A fresh PostgreSQL database of this module's own, dropped afterwards."""
    import psycopg

    try:
        admin = psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"no PostgreSQL answers at {ADMIN_URL}: {error}".strip())
    name = f"mlxlab_test_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="module")
def pg_lab(database_url, tmp_path_factory, model_folder):
    # A Redis database of its own too: the session's job workers must not take its jobs.
    broker = urlparse(os.environ["REDIS_URL"])._replace(path="/14").geturl()
    redis.Redis.from_url(broker).flushdb()
    lab = start_jobs_lab(
        tmp_path_factory.mktemp("pg-lab"),
        model_folder,
        DEFAULT_MODEL,
        extra_env={"DATABASE_URL": database_url, "REDIS_URL": broker},
    )
    try:
        yield lab
    finally:
        for client in lab.clients:
            client.close()
        lab.server.stop()
        lab.worker.stop()


def test_the_migrations_describe_the_models_on_postgresql(pg_lab, database_url):
    import psycopg

    with psycopg.connect(database_url) as db:
        tables = {row[0] for row in db.execute("SELECT tablename FROM pg_tables")}
    # Every app's tables, the API key's on the table it kept when it moved apps.
    assert {"inference_apikey", "inference_languagemodel", "jobs_job", "lab_conversation",
            "publishing_hubtoken"} <= tables  # fmt: skip
    check = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT, env=pg_lab.env, capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_job_runs_on_the_worker_over_postgresql(pg_lab):
    client = pg_lab.client()
    lines = [
        {"messages": [{"role": "user", "content": f"Colour {i}?"},
                      {"role": "assistant", "content": "The answer is blue."}]}
        for i in range(10)
    ]  # fmt: skip
    upload = client.post(
        "/api/datasets/uploads",
        files={"file": ("chat.jsonl", "".join(json.dumps(line) + "\n" for line in lines))},
    )
    assert upload.status_code == 201, upload.text
    answer = client.post(
        "/api/jobs",
        json={"kind": "dataset", "params": {"format": "chat", "source": {"upload": upload.json()["id"]},
                                            "split": {"train": 0.8, "valid": 0.2, "test": 0}}},
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    job = pg_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["counts"] == {"train": 8, "valid": 2, "test": 0}


def test_responses_are_stored_and_continued_over_postgresql(pg_lab):
    client = pg_lab.client()
    first = client.post(
        "/v1/responses",
        json={"model": DEFAULT_MODEL, "input": "Name a colour.", "max_output_tokens": 4},
    )
    assert first.status_code == 200, first.text
    follow = client.post(
        "/v1/responses",
        json={"model": DEFAULT_MODEL, "input": "Another?", "max_output_tokens": 4,
              "previous_response_id": first.json()["id"]},
    )  # fmt: skip
    assert follow.status_code == 200, follow.text
    # The stored chain: the first turn's input and reply come before the second's input.
    assert follow.json()["usage"]["input_tokens"] > first.json()["usage"]["input_tokens"]
    items = client.get(f"/v1/responses/{follow.json()['id']}/input_items").json()["data"]
    assert [item["content"] for item in items] == ["Another?"]


def test_a_revoked_key_is_refused_at_once_over_postgresql(pg_lab):
    client = pg_lab.client()
    made = client.post("/api/keys", json={"label": "short-lived"})
    assert made.status_code == 201, made.text
    key = made.json()
    with httpx.Client(base_url=pg_lab.url, timeout=30) as other:
        headers = {"Authorization": f"Bearer {key['key']}"}
        assert other.get("/v1/models", headers=headers).status_code == 200
        assert client.delete(f"/api/keys/{key['id']}").status_code in (200, 204)
        assert other.get("/v1/models", headers=headers).status_code == 401
