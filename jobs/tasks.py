"""Celery tasks: thin, they only hand a job id to the runner."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from .runner import execute, fail_orphans
from .submission import RUN_JOB, resend_queued
from .watchdog import start_watchdog

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, name=RUN_JOB)
def run_job(self, job_id: str) -> str:
    return execute(job_id, self.request.hostname)


@worker_ready.connect
def fail_jobs_of_a_lost_worker(sender=None, **kwargs) -> None:
    """A worker coming up under a name finds that name's unfinished jobs orphaned."""
    count = fail_orphans(sender.hostname)
    if count:
        log.warning("marked %d job(s) left running by a lost worker as failed", count)


@worker_ready.connect
def resend_lost_messages(sender=None, **kwargs) -> None:
    """Queued jobs whose message the broker lost (a restart without its data) run again.

    Re-sending one whose message still exists is harmless: the claim is one UPDATE,
    so the second delivery finds the job no longer queued.
    """
    count = resend_queued()
    if count:
        log.info("re-sent %d queued job(s) to the broker", count)


@worker_ready.connect
def watch_job_processes(sender=None, **kwargs) -> None:
    """In the worker's main process, which outlives the child that runs a job."""
    start_watchdog("worker")
