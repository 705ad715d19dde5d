"""The Celery app for long jobs, configured from Django settings (CELERY_ namespace)."""

import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

app = Celery("mlxlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def prepare_for_mlx(**kwargs) -> None:
    """Each pool process runs MLX jobs: its BLAS goes under MLX before any job imports it
    (the parent never imports MLX, so that forking stays safe)."""
    from inference.engine.process.startup import prepare_mlx_process

    prepare_mlx_process()
