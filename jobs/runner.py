"""Runs one job on a worker: claim it, give its service a context, finish it cleanly.

A job is claimed by moving it from queued to running in one UPDATE, so a task
delivered twice (acks_late redelivery) finds nothing to do the second time. Its
service writes into a private `.partial-<id>` folder, which becomes the artifact
folder only on success; anything else removes it, so no half-made model is
ever registered.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import deque
from datetime import timedelta
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.db import connection
from django.utils import timezone

from inference.models import Adapter
from labsettings import lab_settings

from .context import JobCancelled, JobFailed, JobLost, JobResult
from .events import publish
from .kinds import service
from .models import Job

log = logging.getLogger(__name__)

LOG_LINES = 200
SAVE_EVERY = 0.5  # seconds between progress writes: the page needs no more


def artifacts_dir() -> Path:
    return lab_settings.artifacts_dir


def partial_dir(job_id) -> Path:
    return artifacts_dir() / f".partial-{job_id}"


class DbJobContext:
    """The JobContext a worker gives a service: progress to the DB and the channel layer."""

    def __init__(self, job: Job, workdir: Path) -> None:
        self.job = job
        self.job_id = str(job.id)
        self.params = job.params
        self.workdir = workdir
        self._lines = deque(job.log_tail.splitlines(), maxlen=LOG_LINES)
        self._saved_at = 0.0
        self._checked_at = 0.0

    def progress(self, fraction: float, message: str = "", *, eta_seconds=None) -> None:
        self.job.progress = min(max(float(fraction), 0.0), 1.0)
        self.job.message = message[:300] or self.job.message
        self.job.eta_seconds = eta_seconds
        self.check_cancelled()  # first: a job that ended meanwhile keeps its final row
        self._save(force=fraction >= 1.0)

    def metric(self, series: str, x: float, y: float) -> None:
        self.job.metrics.setdefault(series, []).append([x, y])

    def set_metrics(self, **values) -> None:
        self.job.metrics.update(values)

    def log(self, line: str) -> None:
        self._lines.append(line)
        self.job.log_tail = "\n".join(self._lines)

    def check_cancelled(self) -> None:
        # Services call this before every training batch: ask the database at most
        # every SAVE_EVERY seconds, not once per step.
        now = time.monotonic()
        if now - self._checked_at < SAVE_EVERY:
            return
        self._checked_at = now
        check_still_ours(self.job.id)

    def _save(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._saved_at >= SAVE_EVERY:
            self._saved_at = now
            self.job.save(
                update_fields=["progress", "message", "eta_seconds", "metrics", "log_tail"]
            )
            publish(self.job)


def check_still_ours(job_id) -> None:
    """Raise JobCancelled if the job was asked to stop, JobLost if it already ended."""
    status, cancel = Job.objects.values_list("status", "cancel_requested").get(id=job_id)
    if status != "running":
        raise JobLost()
    if cancel:
        raise JobCancelled()


def claim(job_id, worker: str) -> Job | None:
    """Move a queued job to running for this worker; None if another delivery has it."""
    now = timezone.now()
    claimed = Job.objects.filter(id=job_id, status="queued", cancel_requested=False).update(
        status="running", worker=worker, started_at=now, heartbeat_at=now, message="starting"
    )
    return Job.objects.get(id=job_id) if claimed else None


class Heartbeat:
    """A thread that stamps the running job's row until the job ends (or the process dies)."""

    def __init__(self, job_id) -> None:
        self.job_id = job_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="job-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(lab_settings.job_heartbeat_seconds):
                Job.objects.filter(id=self.job_id, status="running").update(
                    heartbeat_at=timezone.now()
                )
        finally:
            connection.close()  # this thread's own database connection


def execute(job_id, worker: str) -> str:
    """Run a job to its end; returns the status it ended with (or why it did not run)."""
    job = claim(job_id, worker)
    if job is None:
        return "not queued"
    workdir = partial_dir(job.id)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    context = DbJobContext(job, workdir)
    try:
        context.log(f"{job.kind} started on {worker}")
        with Heartbeat(job.id):
            result = service(job.kind).run(context)
        _succeed(job, context, result)
    # The partial output goes before the final status is saved: whoever sees the job
    # ended must not find it still on disk.
    except JobLost:
        shutil.rmtree(workdir, ignore_errors=True)
        log.warning("job %s was failed by a watchdog while it ran; its output is dropped", job.id)
        return "lost"
    except JobCancelled:
        shutil.rmtree(workdir, ignore_errors=True)
        _end(job, context, "cancelled", "cancelled on request")
    except JobFailed as error:  # a reason for the user, not a bug: no traceback
        shutil.rmtree(workdir, ignore_errors=True)
        _end(job, context, "failed", str(error), error=True)
    except SoftTimeLimitExceeded:
        shutil.rmtree(workdir, ignore_errors=True)
        _end(job, context, "failed", "stopped: the job ran past its time limit", error=True)
    except Exception as error:
        log.exception("job %s failed", job.id)
        shutil.rmtree(workdir, ignore_errors=True)
        _end(job, context, "failed", f"{type(error).__name__}: {error}", error=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return job.status


def _succeed(job: Job, context: DbJobContext, result: JobResult) -> None:
    check_still_ours(job.id)  # a job failed meanwhile registers nothing
    final = artifacts_dir() / str(job.id)
    shutil.rmtree(final, ignore_errors=True)
    context.workdir.rename(final)
    made = dict(result.summary)
    try:
        if result.model:
            # Imported here: the worker's parent process must not load MLX before it forks.
            from inference.model_registry import model_register

            path = final / result.model_subdir
            if result.model_folder is not None:
                path = install_folder(path, result.model_folder)
            made["model"] = model_register(
                name=result.model, path=path, replace=False, origin=result.origin
            ).name
            if result.model_folder is not None:
                _remove_siblings(result.model_folder)
        if result.adapter:
            made["adapter"] = _register_adapter(job, result, final / result.adapter_subdir).name
    except Exception:  # a name clash: the job fails, and leaves nothing behind
        shutil.rmtree(final, ignore_errors=True)
        raise
    job.artifact_path = str(final)
    job.result = made
    context.log("finished")
    _finish(job, "succeeded", progress=1.0, message="finished")


def install_folder(source: Path, target: Path) -> Path:
    """Move `source` to `target`; a folder already there is moved aside first and removed
    after, so `target` never holds a mix of the two."""
    target.parent.mkdir(parents=True, exist_ok=True)
    incoming = target.with_name(f".{target.name}.incoming")
    shutil.rmtree(incoming, ignore_errors=True)
    shutil.move(source, incoming)  # a rename on one filesystem, else a copy
    if target.exists():
        outgoing = target.with_name(f".{target.name}.outgoing")
        shutil.rmtree(outgoing, ignore_errors=True)
        target.rename(outgoing)
        incoming.rename(target)
        shutil.rmtree(outgoing, ignore_errors=True)
    else:
        incoming.rename(target)
    return target


def _remove_siblings(folder: Path) -> None:
    """The folders an installed model replaced (an earlier commit's): the registry no
    longer points at them, and a worker still serving one has its weights in memory."""
    for other in folder.parent.iterdir():
        if other != folder and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


def _register_adapter(job: Job, result: JobResult, path: Path) -> Adapter:
    name = result.adapter["name"]
    if Adapter.objects.filter(name=name).exclude(job_id=str(job.id)).exists():
        raise ValueError(f"an adapter named '{name}' was registered by another job meanwhile")
    adapter, _ = Adapter.objects.update_or_create(
        name=name,
        defaults={
            "base_model": result.adapter["base_model"],
            "path": str(path),
            "fine_tune_type": result.adapter.get("fine_tune_type", "lora"),
            "job_id": str(job.id),
            "summary": result.summary,
        },
    )
    return adapter


def _end(job: Job, context: DbJobContext, status: str, reason: str, error: bool = False) -> None:
    context.log(reason)
    if error:
        job.error = reason
    _finish(job, status, message=reason)


FINISH_FIELDS = [
    "status", "finished_at", "progress", "message", "eta_seconds", "metrics", "log_tail",
    "artifact_path", "result", "error",
]  # fmt: skip


def _finish(job: Job, status: str, **fields) -> None:
    for name, value in {"status": status, "finished_at": timezone.now(), **fields}.items():
        setattr(job, name, value)
    job.eta_seconds = None
    job.save(update_fields=FINISH_FIELDS)  # not cancel_requested: the API may be setting it
    publish(job)


def fail_orphans(worker: str) -> int:
    """Jobs left running by this worker's previous life (killed, crashed): failed, cleaned."""
    orphans = list(Job.objects.filter(status="running", worker=worker))
    reason = f"the worker ({worker}) stopped while running this job (killed or crashed)"
    return _fail_lost(orphans, reason)


def fail_stale(*, stale_seconds: float) -> int:
    """Running jobs whose process stopped beating (killed by the OOM killer or the hard
    time limit, crashed): failed with the reason, their partial output removed."""
    cutoff = timezone.now() - timedelta(seconds=stale_seconds)
    stale = list(Job.objects.filter(status="running", heartbeat_at__lt=cutoff))
    reason = (
        f"the process running this job stopped (no heartbeat for {stale_seconds:g} s: killed, "
        "out of memory, or past its hard time limit)"
    )
    return _fail_lost(stale, reason)


def _fail_lost(jobs: list[Job], reason: str) -> int:
    failed = 0
    for job in jobs:
        shutil.rmtree(partial_dir(job.id), ignore_errors=True)
        job.error = f"{reason}; its partial output was removed"
        job.log_tail = "\n".join([*job.log_tail.splitlines()[-LOG_LINES + 1 :], job.error])
        job.status, job.message, job.finished_at = "failed", "worker lost", timezone.now()
        job.eta_seconds = None
        # One UPDATE, and only of a job still running (it may have finished since it was
        # read): no reader ever sees it failed without its reason.
        fields = ("status", "message", "finished_at", "eta_seconds", "error", "log_tail")
        lost = {name: getattr(job, name) for name in fields}
        if Job.objects.filter(id=job.id, status="running").update(**lost):
            publish(job)
            failed += 1
    return failed
