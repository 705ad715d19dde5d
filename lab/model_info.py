"""What the models page shows about a registered model, read from its folder."""

from __future__ import annotations

import json
from pathlib import Path

from inference.engines import default_model_name, mounted_adapters, resident_models
from inference.model_registry import model_capabilities
from inference.models import LanguageModel
from inference.sampling_defaults import FIELDS
from inference.sampling_defaults import sampling_defaults as model_sampling_defaults
from labsettings import lab_settings

from .model_removal import disk_bytes, managed_folder


def _json_file(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def chat_template(folder: Path) -> str | None:
    """The template mlx-lm will use: a chat_template.jinja file wins over tokenizer_config."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    template = _json_file(folder / "tokenizer_config.json").get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return template if isinstance(template, str) else None


def supports_thinking(template: str | None) -> bool:
    """Whether the template has a thinking switch the page can offer."""
    return bool(template) and "enable_thinking" in template


def sampling_defaults(record: LanguageModel) -> dict:
    """The values a chat with this model gets for the fields it leaves out."""
    defaults = model_sampling_defaults(record.path, record.thinking_declaration())
    values = {name: getattr(defaults, name) for name in FIELDS}
    # No max_tokens: a chat runs to the end of the context, unless the operator caps it.
    cap = lab_settings.default_max_tokens
    return {**values, "max_tokens": defaults.chat_max_tokens if cap else None}


def model_summary(record: LanguageModel) -> dict:
    return {
        "name": record.name,
        "architecture": record.architecture,
        "quantization": record.quantization,
        "size_bytes": record.size_bytes,
        "context_length": record.context_length,
        "loaded": record.name in resident_models(),
        "default": record.name == default_model_name(),
        "draft_model": record.draft_model.name if record.draft_model_id else None,
        "disk_bytes": _disk_bytes(record),
        "files_managed": managed_folder(record) is not None,
        "repo_id": record.repo_id or None,
        "revision": record.revision or None,
        "commit": record.commit_sha or None,
        # What it serves ("chat", "embeddings"): the chat pickers list chat models only.
        "capabilities": model_capabilities(record),
    }


def _disk_bytes(record: LanguageModel) -> int:
    folder = Path(record.path)
    return disk_bytes(folder) if folder.is_dir() else 0


def model_details(record: LanguageModel, *, staff: bool) -> dict:
    """What the models page shows of one model. Where the install keeps things is for staff:
    others see the folder under the models directory at most, and a config without
    absolute paths (a converted model's `_name_or_path` may name the converting host's)."""
    folder = Path(record.path)
    template = chat_template(folder)
    config = _json_file(folder / "config.json")
    return {
        **model_summary(record),
        "path": record.path if staff else _relative_path(folder),
        "config": config if staff else _without_absolute_paths(config),
        "chat_template": template,
        "supports_thinking": supports_thinking(template),
        "defaults": sampling_defaults(record),
        # Mounted on its running workers by an operator (POST /api/models/<name>/adapters).
        "adapters": mounted_adapters(record.name),
    }


def _relative_path(folder: Path) -> str | None:
    models = lab_settings.models_dir.resolve()
    resolved = folder.resolve()
    return str(resolved.relative_to(models)) if resolved.is_relative_to(models) else None


def _without_absolute_paths(value: object) -> object:
    if isinstance(value, dict):
        return {key: _without_absolute_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_absolute_paths(item) for item in value]
    if isinstance(value, str) and Path(value).is_absolute():
        return None
    return value
