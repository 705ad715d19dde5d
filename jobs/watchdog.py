"""The watchdog: fails running jobs whose process stopped beating.

It runs in two places. The Celery worker's main process outlives the pool child that
runs a job, so it notices a child killed by the OOM killer or the hard time limit. The
web process notices the rest: a whole worker killed, or on a host that went away.
Both may fail the same job: the failing UPDATE only matches a job still running.
"""

from __future__ import annotations

import logging
import threading

from django.db import connection

from labsettings import lab_settings

from .runner import fail_stale

log = logging.getLogger(__name__)


def start_watchdog(where: str) -> threading.Thread:
    """Check every JOB_HEARTBEAT_SECONDS, on a daemon thread, for the process's life."""
    thread = threading.Thread(target=_watch, args=(where,), name="job-watchdog", daemon=True)
    thread.start()
    return thread


def _watch(where: str) -> None:
    stop = threading.Event()
    while not stop.wait(lab_settings.job_heartbeat_seconds):
        try:
            count = fail_stale(stale_seconds=lab_settings.job_stale_seconds)
            if count:
                log.warning("%s: failed %d job(s) whose process stopped", where, count)
        except Exception:  # the database may be briefly locked: try again next beat
            log.exception("job watchdog check failed")
        finally:
            connection.close()
