"""Celery tasks: thin, they only hand a job id to the runner."""

from __future__ import annotations

import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import connection

from .runner import execute, fail_orphans, fail_stale
from .submission import resend_queued

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
def start_watchdog(sender=None, **kwargs) -> None:
    """In the worker's main process, which outlives the child that runs a job: a child
    killed by the OOM killer or the hard time limit leaves its job failed within
    JOB_STALE_SECONDS, without waiting for anything to restart."""
    threading.Thread(target=_watch, name="job-watchdog", daemon=True).start()


def _watch() -> None:
    stop = threading.Event()
    while not stop.wait(settings.JOB_HEARTBEAT_SECONDS):
        try:
            count = fail_stale(stale_seconds=settings.JOB_STALE_SECONDS)
            if count:
                log.warning("failed %d job(s) whose process stopped", count)
        except Exception:  # the database may be briefly locked: try again next beat
            log.exception("job watchdog check failed")
        finally:
            connection.close()
