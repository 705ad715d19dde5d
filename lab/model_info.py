"""What the models page shows about a registered model, read from its folder."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

from inference.engine import SamplingParams
from inference.engines import default_model_name, resident_models
from inference.models import LanguageModel

# generation_config.json keys the chat page's controls take as the model's defaults.
GENERATION_DEFAULTS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}


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


def sampling_defaults(folder: Path) -> dict:
    """The server's defaults, overridden by the model's own generation_config.json."""
    server = SamplingParams()
    defaults = {
        "temperature": server.temperature,
        "top_p": server.top_p,
        "top_k": server.top_k,
        "min_p": server.min_p,
        "repetition_penalty": server.repetition_penalty,
        "max_tokens": settings.MLXLAB["DEFAULT_MAX_TOKENS"],
    }
    generation = _json_file(folder / "generation_config.json")
    for key, name in GENERATION_DEFAULTS.items():
        if isinstance(generation.get(key), int | float) and not isinstance(generation[key], bool):
            defaults[name] = generation[key]
    return defaults


def model_summary(record: LanguageModel) -> dict:
    return {
        "name": record.name,
        "architecture": record.architecture,
        "quantization": record.quantization,
        "size_bytes": record.size_bytes,
        "context_length": record.context_length,
        "loaded": record.name in resident_models(),
        "default": record.name == default_model_name(),
    }


def model_details(record: LanguageModel) -> dict:
    folder = Path(record.path)
    template = chat_template(folder)
    return {
        **model_summary(record),
        "path": record.path,
        "config": _json_file(folder / "config.json"),
        "chat_template": template,
        "supports_thinking": supports_thinking(template),
        "defaults": sampling_defaults(folder),
    }
