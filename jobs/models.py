import uuid

from django.conf import settings
from django.db import models


class Job(models.Model):
    """One long piece of work, run by a Celery worker, watched from the lab."""

    KINDS = [
        ("pull", "pull"),  # a model from the Hugging Face Hub
        ("quantize", "quantize"),
        ("finetune", "finetune"),
        ("dataset", "dataset"),
        ("evaluate", "evaluate"),
        ("publish", "publish"),  # a push to the Hugging Face Hub of another job's result
    ]
    STATUSES = [
        ("queued", "queued"),
        ("running", "running"),
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("cancelled", "cancelled"),
    ]
    FINISHED = ("succeeded", "failed", "cancelled")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=KINDS)
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=STATUSES, default="queued", db_index=True)
    progress = models.FloatField(default=0.0)  # 0..1
    eta_seconds = models.FloatField(null=True, blank=True)
    message = models.CharField(max_length=300, blank=True)  # what it is doing now
    metrics = models.JSONField(default=dict, blank=True)  # e.g. {"train_loss": [[it, loss]]}
    log_tail = models.TextField(blank=True)
    artifact_path = models.CharField(max_length=1000, blank=True)
    result = models.JSONField(default=dict, blank=True)  # what it made: model, adapter, counts
    error = models.TextField(blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    cancel_requested = models.BooleanField(default=False)
    task_id = models.CharField(max_length=100, blank=True)
    worker = models.CharField(max_length=200, blank=True)  # the Celery hostname running it
    # Written by the process running the job every few seconds: a stale one means that
    # process died (killed, out of memory, past its hard time limit).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED
