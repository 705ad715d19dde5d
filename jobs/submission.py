"""Submitting and cancelling jobs: what the API and the pages call."""

from __future__ import annotations

from celery import current_app
from django.db import transaction
from django.utils import timezone

from .events import publish
from .kinds import validate
from .models import Job

# tasks.run_job registers under this name. Sending by name lets tasks import this module
# (a starting worker re-sends queued jobs) without this one importing tasks back.
RUN_JOB = "jobs.run_job"


def submit_job(*, kind: str, params, owner) -> Job:
    """Validate, record and queue a job (JobParamsError when the params will not do)."""
    return queue_job(kind=kind, params=validate(kind, params, owner=owner), owner=owner)


class BrokerUnavailable(Exception):
    """The job queue (Redis) does not answer: nothing was recorded."""


def queue_job(*, kind: str, params: dict, owner) -> Job:
    """Record and queue a job whose parameters are already validated.

    Raises BrokerUnavailable, leaving no row, when the queue does not answer.
    """
    _check_broker()
    job = Job.objects.create(kind=kind, params=params, owner=owner, message="queued")
    # Queue only once the row is committed, or a fast worker could look for it too early.
    transaction.on_commit(lambda: _enqueue(job))
    return job


def _check_broker() -> None:
    try:
        with current_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
    except Exception as error:
        raise BrokerUnavailable(
            f"the job queue does not answer ({type(error).__name__}); try again shortly"
        ) from None


def _send(job_id, **options):
    # The job id is the task id too: revoking a job needs nothing stored.
    return current_app.send_task(RUN_JOB, args=[str(job_id)], task_id=str(job_id), **options)


def _enqueue(job: Job) -> None:
    try:
        result = _send(job.id, retry=False)
    except Exception as error:  # the broker went away since the check: never stay queued
        Job.objects.filter(id=job.id, status="queued").update(
            status="failed",
            finished_at=timezone.now(),
            message="could not be queued",
            error=f"the job queue did not take the job ({type(error).__name__})",
        )
        job.refresh_from_db()
        publish(job)
        return
    Job.objects.filter(id=job.id).update(task_id=result.id)
    publish(job)


def resend_queued() -> int:
    """Send every queued job's message again (see tasks.resend_lost_messages)."""
    ids = list(Job.objects.filter(status="queued").values_list("id", flat=True))
    for job_id in ids:
        _send(job_id)
    return len(ids)


def cancel_job(job: Job) -> Job:
    """Ask a job to stop: a queued one ends now, a running one at its next check."""
    if job.finished:
        return job
    # Conditional updates: the worker may claim the job between our read and our write.
    Job.objects.filter(id=job.id, status="queued").update(
        status="cancelled", finished_at=timezone.now(), message="cancelled"
    )
    Job.objects.filter(id=job.id).update(cancel_requested=True)
    job.refresh_from_db()
    # A queued task is dropped by the worker on arrival; a running one checks the flag.
    current_app.control.revoke(str(job.id))
    publish(job)
    return job
