"""Celery tasks: thin, they only hand a job id to the runner."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from .runner import execute, fail_orphans

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, name="jobs.run_job")
def run_job(self, job_id: str) -> str:
    return execute(job_id, self.request.hostname)


@worker_ready.connect
def fail_jobs_of_a_lost_worker(sender=None, **kwargs) -> None:
    """A worker coming up under a name finds that name's unfinished jobs orphaned."""
    count = fail_orphans(sender.hostname)
    if count:
        log.warning("marked %d job(s) left running by a lost worker as failed", count)
