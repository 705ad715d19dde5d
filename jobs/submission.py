"""Submitting and cancelling jobs: what the API and the pages call."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from .events import publish
from .kinds import validate
from .models import Job


def submit_job(*, kind: str, params, owner) -> Job:
    """Validate, record and queue a job (JobParamsError when the params will not do)."""
    return queue_job(kind=kind, params=validate(kind, params, owner=owner), owner=owner)


def queue_job(*, kind: str, params: dict, owner) -> Job:
    """Record and queue a job whose parameters are already validated."""
    from .tasks import run_job  # the Celery app is configured by then

    job = Job.objects.create(kind=kind, params=params, owner=owner, message="queued")
    # Queue only once the row is committed, or a fast worker could look for it too early.
    transaction.on_commit(lambda: _enqueue(job, run_job))
    return job


def _enqueue(job: Job, task) -> None:
    result = task.apply_async(args=[str(job.id)], task_id=str(job.id))
    Job.objects.filter(id=job.id).update(task_id=result.id)
    publish(job)


def cancel_job(job: Job) -> Job:
    """Ask a job to stop: a queued one ends now, a running one at its next check."""
    from .tasks import run_job

    if job.finished:
        return job
    # Conditional updates: the worker may claim the job between our read and our write.
    Job.objects.filter(id=job.id, status="queued").update(
        status="cancelled", finished_at=timezone.now(), message="cancelled"
    )
    Job.objects.filter(id=job.id).update(cancel_requested=True)
    job.refresh_from_db()
    # A queued task is dropped by the worker on arrival; a running one checks the flag.
    run_job.app.control.revoke(str(job.id))
    publish(job)
    return job
