"""Deleting a model: its registry row, and its files when the lab made them.

Files go only when they lie under the models directory (pulled, imported); a folder
registered from elsewhere is the operator's and stays. A model is never deleted while
a worker holds it, while it is pinned or the default, or while an unfinished job uses it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from inference.engines import default_model_name, model_is_resident, supervisor_pinned
from inference.models import LanguageModel
from jobs.models import Job
from labsettings import lab_settings

# The params in which jobs name the models they read.
MODEL_PARAMS = ("model", "base_model", "models", "name", "draft_model")


class DeleteRefused(ValueError):
    """The model cannot go now; the text says why."""


def managed_folder(record: LanguageModel) -> Path | None:
    """The folder to remove with the model, if the lab made it under the models directory."""
    models = lab_settings.models_dir.resolve()
    path = Path(record.path).resolve()
    if not path.is_relative_to(models) or path == models:
        return None
    if record.repo_id and path.parent.name == record.name and path.parent != models:
        return path.parent  # a pull's <name>/<commit> layout: the whole <name> folder
    return path


def disk_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def _used_by_a_job(name: str) -> Job | None:
    for job in Job.objects.filter(status__in=("queued", "running")):
        params = job.params if isinstance(job.params, dict) else {}
        for key in MODEL_PARAMS:
            value = params.get(key)
            if value == name or (isinstance(value, list) and name in value):
                return job
    return None


def delete_model(record: LanguageModel) -> dict:
    """Remove the model; `{"name", "deleted": True, "freed_bytes"}` or DeleteRefused."""
    name = record.name
    if name == default_model_name():
        raise DeleteRefused(f"'{name}' is the lab's default model (MLXLAB_DEFAULT_MODEL)")
    if name in supervisor_pinned():
        raise DeleteRefused(f"'{name}' is pinned: it stays loaded")
    if model_is_resident(name):
        raise DeleteRefused(f"'{name}' is loaded: unload it first")
    if job := _used_by_a_job(name):
        raise DeleteRefused(f"'{name}' is used by a {job.status} {job.kind} job ({job.id})")
    folder = managed_folder(record)
    freed = disk_bytes(folder) if folder is not None and folder.is_dir() else 0
    record.delete()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "name": name,
        "deleted": True,
        "freed_bytes": freed,
        "files_removed": folder is not None,
    }
