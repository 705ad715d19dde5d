"""Parameter checks job kinds share: known keys, strings, registry models, dataset jobs."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from .context import JobParamsError

NAME_PATTERN = re.compile(r"[a-z0-9_-]{1,200}")


def check_known(params, keys: set[str]) -> dict:
    if not isinstance(params, dict):
        raise JobParamsError("params must be a JSON object")
    unknown = sorted(set(params) - keys)
    if unknown:
        raise JobParamsError(f"unknown param '{unknown[0]}'")
    return params


def required_string(params: dict, key: str) -> str:
    value = params.get(key)
    if value is None:
        raise JobParamsError(f"{key} is required")
    if not isinstance(value, str) or not value:
        raise JobParamsError(f"{key} must be a non-empty string")
    return value


def check_int(value, key: str):
    """`value` unless it is not an integer (bool is an int subclass: `true` is not 1)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobParamsError(f"{key} must be an integer")
    return value


def registered_model(name: str) -> tuple[Path, dict]:
    """A registry model's folder and config, checked to be a local model folder."""
    from inference.model_registry import model_named

    record = model_named(name)
    if record is None:
        raise JobParamsError(f"model '{name}' is not in the registry")
    folder = Path(record.path)
    # mlx-lm treats a missing local path as a Hugging Face repo id and downloads it.
    if not (folder / "config.json").is_file():
        raise JobParamsError(f"model '{name}' has no config.json at {folder}")
    try:
        config = json.loads((folder / "config.json").read_text())
    except ValueError:
        raise JobParamsError(f"model '{name}' has an unreadable config.json") from None
    return folder, config if isinstance(config, dict) else {}


def claimed_by_a_job(name: str) -> bool:
    """Whether a queued or running job will register a model or an adapter as `name`:
    two jobs must never race to the same name."""
    from .models import Job

    unfinished = Job.objects.filter(status__in=("queued", "running")).values_list(
        "params", flat=True
    )
    return any(
        name in (params.get("name"), params.get("adapter_name"), params.get("fused_name"))
        for params in unfinished
        if isinstance(params, dict)
    )


def dataset_job_folder(job_id) -> Path:
    """The folder of a succeeded dataset job, named by its id in `dataset.job`."""
    from .models import Job

    try:
        key = uuid.UUID(job_id) if isinstance(job_id, str) else None
    except ValueError:
        key = None
    if key is None:
        raise JobParamsError("dataset.job must be a job id (a UUID string)")
    job = Job.objects.filter(id=key).first()
    if job is None:
        raise JobParamsError(f"dataset.job {job_id} does not exist")
    if job.kind != "dataset":
        raise JobParamsError(f"dataset.job {job_id} is a {job.kind} job, not a dataset job")
    if job.status != "succeeded":
        raise JobParamsError(f"dataset.job {job_id} has not succeeded (it is {job.status})")
    if not job.artifact_path or not Path(job.artifact_path).is_dir():
        raise JobParamsError(f"dataset.job {job_id} has no dataset folder")
    return Path(job.artifact_path)
