"""Facts about an MLX / Hugging Face model folder, read without loading weights: the web
side registers folders with them, the worker reads its context window from the same rule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# When a config names no context length, assume what most small models train on.
FALLBACK_CONTEXT_LENGTH = 2048


def read_context_length(config: dict) -> int:
    """The model's context window, from the usual config.json keys."""
    for key in ("max_position_embeddings", "max_sequence_length", "n_positions", "seq_length"):
        value = config.get(key) or config.get("text_config", {}).get(key)
        if isinstance(value, int) and value > 0:
            return value
    return FALLBACK_CONTEXT_LENGTH


class ModelFolderError(ValueError):
    """The folder is not a model mlx-lm can load."""


@dataclass(frozen=True)
class ModelFacts:
    architecture: str
    quantization: str
    context_length: int
    size_bytes: int


def describe_quantization(config: dict) -> str:
    quantization = config.get("quantization") or config.get("quantization_config")
    if isinstance(quantization, dict) and "bits" in quantization:
        mode = quantization.get("mode", "affine")
        return f"{quantization['bits']}-bit {mode}, group {quantization.get('group_size', 64)}"
    return str(config.get("torch_dtype") or config.get("dtype") or "float")


def describe_model_folder(path: Path) -> ModelFacts:
    """Architecture, quantization, context length and size on disk of a model folder."""
    config_path = path / "config.json"
    if not path.is_dir():
        raise ModelFolderError(f"{path} is not a directory")
    if not config_path.is_file():
        raise ModelFolderError(f"{path} has no config.json")
    if not any(path.glob("*.safetensors")):
        raise ModelFolderError(f"{path} has no .safetensors weights")
    try:
        config = json.loads(config_path.read_text())
    except ValueError as exc:
        raise ModelFolderError(f"{config_path} is not valid JSON: {exc}") from None
    return ModelFacts(
        architecture=str(config.get("model_type", "unknown")),
        quantization=describe_quantization(config),
        context_length=read_context_length(config),
        size_bytes=sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
    )
