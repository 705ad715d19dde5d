"""Jobs never stuck: a dead process's job fails with the reason, a lost message is sent
again, and a queue that does not answer leaves no row behind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from jobs.models import Job
from jobs.runner import fail_stale
from tests.conftest import DEFAULT_MODEL


@pytest.fixture
def staff(db, django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("root", is_staff=True))
    return client


def test_a_job_whose_process_stopped_beating_is_failed_with_the_reason(db):
    now = timezone.now()
    dead = Job.objects.create(
        kind="quantize", status="running", heartbeat_at=now - timedelta(minutes=2)
    )
    alive = Job.objects.create(kind="quantize", status="running", heartbeat_at=now)
    assert fail_stale(stale_seconds=45) == 1
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert dead.status == "failed" and dead.finished_at is not None
    assert "no heartbeat for 45 s" in dead.error and "out of memory" in dead.error
    assert alive.status == "running"
    assert fail_stale(stale_seconds=45) == 0  # failed once, and only once


def test_a_queue_that_does_not_answer_is_a_503_and_leaves_no_row(staff, model_folder):
    from inference.model_registry import model_register
    from jobs.tasks import run_job

    model_register(name="source", path=model_folder)
    app = run_job.app
    saved = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    try:
        answer = staff.post(
            "/api/jobs",
            {"kind": "quantize", "params": {"model": "source", "name": "made-q4"}},
            content_type="application/json",
        )
    finally:
        app.conf.broker_url = saved
    assert answer.status_code == 503, answer.content
    assert "job queue does not answer" in answer.json()["detail"]
    assert not Job.objects.exists()


def test_a_queued_job_whose_message_was_lost_runs_when_a_worker_starts(jobs_lab):
    """Redis restarted without its data while the worker was down: the job row says
    queued, the broker knows nothing of it. The next worker to start sends it again."""
    import redis

    jobs_lab.worker.stop()
    try:
        answer = jobs_lab.client().post(
            "/api/jobs",
            json={"kind": "quantize", "params": {"model": DEFAULT_MODEL, "name": "after-loss"}},
        )
        assert answer.status_code == 202, answer.text
        redis.Redis.from_url(jobs_lab.env["REDIS_URL"]).flushdb()  # the message is gone
    finally:
        jobs_lab.worker.start()
    job = jobs_lab.wait_job(answer.json()["id"])
    assert job["status"] == "succeeded", job["error"]
