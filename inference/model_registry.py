"""Services for the model registry: import, register, find."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from .engine.model_folder import describe_model_folder
from .gguf.convert import Progress, import_gguf
from .models import LanguageModel


def model_name_from(path: Path) -> str:
    """A registry name from a file or folder name: lower-case, dashes."""
    return re.sub(r"[^a-z0-9_-]+", "-", path.stem.lower()).strip("-") or "model"


class NameTaken(ValueError):
    """Another folder is registered under this name already."""


def model_register(*, name: str, path: Path, replace: bool = True) -> LanguageModel:
    """Register (or refresh) a model folder under `name`.

    `replace` False (what jobs make): a name held by another folder is NameTaken,
    never a silent repoint of what the workers serve.
    """
    held = LanguageModel.objects.filter(name=name).values_list("path", flat=True).first()
    if not replace and held is not None and held != str(path.resolve()):
        raise NameTaken(f"a model named '{name}' is already registered (at {held})")
    facts = describe_model_folder(path)
    record, _ = LanguageModel.objects.update_or_create(
        name=name,
        defaults={
            "path": str(path.resolve()),
            "architecture": facts.architecture,
            "quantization": facts.quantization,
            "size_bytes": facts.size_bytes,
            "context_length": facts.context_length,
        },
    )
    return record


def model_import_gguf(
    *, gguf_path: Path, name: str | None = None, progress: Progress | None = None
) -> LanguageModel:
    """Convert a GGUF file into the models directory and register it."""
    name = name or model_name_from(gguf_path)
    models_dir = Path(settings.MLXLAB["MODELS_DIR"])
    models_dir.mkdir(parents=True, exist_ok=True)
    imported = import_gguf(gguf_path, models_dir / name, progress)
    return model_register(name=name, path=imported.path)
