"""The Celery app for long jobs, configured from Django settings (CELERY_ namespace)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

app = Celery("mlxlab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
