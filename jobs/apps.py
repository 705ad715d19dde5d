from django.apps import AppConfig


class JobsConfig(AppConfig):
    """Long work on Celery workers: quantize, finetune, build datasets, evaluate."""

    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from prometheus_client import REGISTRY

        from .metrics import JobsCollector

        REGISTRY.register(JobsCollector())
