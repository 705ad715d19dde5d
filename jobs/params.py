"""Parameter checks every job kind shares: known keys, strings, registry models."""

from __future__ import annotations

import json
import re
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
