"""Services for the model registry: import, register, find."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from labsettings import lab_settings

from .models import LanguageModel
from .protocol.embedding_folder import CHAT, EmbeddingSupport, embedding_support
from .protocol.media import folder_media

if TYPE_CHECKING:
    from .gguf.convert import Progress


def model_named(name: str) -> LanguageModel | None:
    """The registry entry called `name`, or None."""
    return LanguageModel.objects.filter(name=name).first()


async def amodel_named(name: str) -> LanguageModel | None:
    """The registry entry called `name`, or None (for async views)."""
    return await LanguageModel.objects.filter(name=name).afirst()


def model_embedding_support(record: LanguageModel) -> EmbeddingSupport:
    """Whether the model embeds (and how) or chats, read from its folder's files: they
    say so, and a registry row made before embeddings were served says nothing."""
    return embedding_support(record.path)


def model_capabilities(record: LanguageModel) -> list[str]:
    """What the model serves: ["chat"] (chat and text completions, Responses, Messages),
    ["embeddings"] or ["rerank"]; none for a folder whose embedding modules or classifier
    are not served here. A chat model that takes media adds "vision" and "audio"."""
    capabilities = list(model_embedding_support(record).capabilities)
    if CHAT in capabilities:
        capabilities += folder_media(record.path)
    return capabilities


def model_exists(name: str) -> bool:
    """Whether a model is registered under `name`."""
    return LanguageModel.objects.filter(name=name).exists()


def model_name_from(path: Path) -> str:
    """A registry name from a file or folder name: lower-case, dashes."""
    return re.sub(r"[^a-z0-9_-]+", "-", path.stem.lower()).strip("-") or "model"


class NameTaken(ValueError):
    """Another folder is registered under this name already."""


def model_register(
    *, name: str, path: Path, replace: bool = True, origin: dict | None = None
) -> LanguageModel:
    """Register (or refresh) a model folder under `name`.

    `replace` False (what jobs make): a name held by another folder is NameTaken,
    never a silent repoint of what the workers serve, unless `origin` (a Hub pull's
    repo_id, revision and commit_sha) names the same repo: a pull updating its model.
    """
    # Imported here, not at the top: the engine brings in MLX, and job validation
    # uses the lookups above without loading it.
    from .protocol.model_folder import describe_model_folder
    from .sampling_defaults import declared_thinking

    held = model_named(name)
    same_repo = origin is not None and held is not None and held.repo_id == origin["repo_id"]
    if not replace and held is not None and held.path != str(path.resolve()) and not same_repo:
        raise NameTaken(f"a model named '{name}' is already registered (at {held.path})")
    facts = describe_model_folder(path)
    thinking = declared_thinking(path)
    record, _ = LanguageModel.objects.update_or_create(
        name=name,
        defaults={
            "path": str(path.resolve()),
            "architecture": facts.architecture,
            "quantization": facts.quantization,
            "size_bytes": facts.size_bytes,
            "context_length": facts.context_length,
            "thinking_default": thinking.enable_thinking,
            "no_think_temperature": thinking.no_think_temperature,
            **{key: (origin or {}).get(key, "") for key in ORIGIN_FIELDS},
        },
    )
    return record


ORIGIN_FIELDS = ("repo_id", "revision", "commit_sha")


def model_import_gguf(
    *, gguf_path: Path, name: str | None = None, progress: Progress | None = None
) -> LanguageModel:
    """Convert a GGUF file into the models directory and register it."""
    from .engine.process.startup import prepare_mlx_process

    prepare_mlx_process()  # before gguf's mlx.core: the optimized BLAS goes under MLX
    from .gguf.convert import import_gguf

    name = name or model_name_from(gguf_path)
    models_dir = lab_settings.models_dir
    models_dir.mkdir(parents=True, exist_ok=True)
    imported = import_gguf(gguf_path, models_dir / name, progress)
    return model_register(name=name, path=imported.path)


class DraftRefused(ValueError):
    """The model named cannot draft for this one."""


def model_set_draft(*, record: LanguageModel, draft_name: str | None) -> LanguageModel:
    """Make `draft_name` (a registered model sharing `record`'s vocabulary) the model's
    default draft model, or clear it with None."""
    from .draft_vocabulary import draft_problem

    draft = None
    if draft_name is not None:
        draft = model_named(draft_name)
        if draft is None:
            raise DraftRefused(f"no model named {draft_name!r}")
        problem = draft_problem(target=record, draft=draft)
        if problem is not None:
            raise DraftRefused(problem)
    record.draft_model = draft
    record.save(update_fields=["draft_model"])
    return record
