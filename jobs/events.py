"""Job state as the API and the websockets show it, and its publication to the browser."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from .models import Job

log = logging.getLogger(__name__)

LIST_GROUP = "jobs"


def job_group(job_id) -> str:
    return f"job-{job_id}"


def job_dict(job: Job) -> dict:
    return {
        "id": str(job.id),
        "kind": job.kind,
        "status": job.status,
        "params": job.params,
        "progress": job.progress,
        "eta_seconds": job.eta_seconds,
        "message": job.message,
        "metrics": job.metrics,
        "log_tail": job.log_tail,
        "artifact_path": job.artifact_path,
        "result": job.result,
        "error": job.error,
        "owner": job.owner.get_username() if job.owner_id else None,
        "cancel_requested": job.cancel_requested,
        "created_at": job.created_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def publish(job: Job) -> None:
    """Tell the job's page and the jobs list; progress must never fail the job itself."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "job.update", "job": job_dict(job)}
    try:
        async_to_sync(layer.group_send)(job_group(job.id), message)
        async_to_sync(layer.group_send)(LIST_GROUP, message)
    except Exception as error:  # Redis away: the API still serves the state from the DB
        log.warning("could not publish job %s progress: %s", job.id, error)
