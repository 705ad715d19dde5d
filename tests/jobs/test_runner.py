"""The runner's guarantees that need no worker: one claim per job, orphans failed."""

from __future__ import annotations

import pytest

from jobs.models import Job
from jobs.runner import claim, execute, fail_orphans, partial_dir


@pytest.fixture
def queued(db) -> Job:
    return Job.objects.create(kind="dataset", params={})


def test_a_job_is_claimed_once(queued):
    assert claim(queued.id, "w1@host").status == "running"
    assert claim(queued.id, "w2@host") is None  # a second delivery finds nothing to do
    assert execute(queued.id, "w2@host") == "not queued"
    assert Job.objects.get(id=queued.id).worker == "w1@host"


def test_a_cancelled_job_is_never_claimed(queued):
    Job.objects.filter(id=queued.id).update(cancel_requested=True)
    assert claim(queued.id, "w1@host") is None


def test_orphans_of_a_lost_worker_fail_and_lose_their_partial_output(queued, settings, tmp_path):
    settings.MLXLAB = settings.MLXLAB.replace(artifacts_dir=tmp_path)
    claim(queued.id, "w1@host")
    partial_dir(queued.id).mkdir(parents=True)
    other = Job.objects.create(kind="dataset", params={})
    claim(other.id, "w2@host")
    assert fail_orphans("w1@host") == 1
    lost = Job.objects.get(id=queued.id)
    assert lost.status == "failed" and "stopped while running this job" in lost.error
    assert not partial_dir(queued.id).exists()
    assert Job.objects.get(id=other.id).status == "running"  # another worker's job


@pytest.mark.parametrize("reports_progress", [True, False])
def test_a_job_failed_by_a_watchdog_while_it_ran_keeps_its_reason_and_registers_nothing(
    queued, settings, tmp_path, monkeypatch, reports_progress
):
    """A stalled process whose job a watchdog failed must not turn it back to succeeded
    when it wakes: its output is dropped and the row keeps the watchdog's reason."""
    from inference.models import LanguageModel
    from jobs.context import JobResult

    settings.MLXLAB = settings.MLXLAB.replace(artifacts_dir=tmp_path)

    class Stalled:
        def run(self, ctx):
            (ctx.workdir / "weights.safetensors").write_text("made while the row was failed")
            Job.objects.filter(id=ctx.job_id).update(status="failed", error="no heartbeat")
            if reports_progress:
                ctx.progress(0.5, "still going")
            return JobResult(model="made-too-late")

    monkeypatch.setattr("jobs.runner.service", lambda kind: Stalled())
    assert execute(queued.id, "w1@host") == "lost"
    job = Job.objects.get(id=queued.id)
    assert (job.status, job.error) == ("failed", "no heartbeat")
    assert list(tmp_path.iterdir()) == []
    assert not LanguageModel.objects.filter(name="made-too-late").exists()
    assert Job.objects.get(id=queued.id).message != "still going"
