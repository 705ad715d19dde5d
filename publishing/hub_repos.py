"""What a model repo on the Hub holds, as the lab reads it: its format, the files serving
needs, its GGUF files, and the Hub's errors in words a user can act on."""

from __future__ import annotations

import re
from dataclasses import dataclass

from huggingface_hub import HfApi, constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from labsettings import lab_settings

from .token_store import TokenUnavailable, token_exists, token_read

# What serving a safetensors model reads: config, tokenizer, chat template, weights.
SERVING_FILES = re.compile(
    r"(config|generation_config|tokenizer_config|special_tokens_map|added_tokens"
    r"|chat_template|preprocessor_config|processor_config)\.json"
    r"|tokenizer\.(json|model)|vocab\.(json|txt)|merges\.txt|chat_template\.jinja"
    r"|[^/]*\.tiktoken|tiktoken\.model"
    r"|[^/]*\.safetensors|model\.safetensors\.index\.json"
)
# What makes a folder an embedding model: sentence-transformers' modules and the Pooling
# module's config (inference/protocol/embedding_folder.py reads them).
SENTENCE_TRANSFORMERS_FILES = re.compile(
    r"(modules|config_sentence_transformers|sentence_bert_config)\.json|\d+_Pooling/config\.json"
)
# Mistral's repos carry the original checkpoint beside the transformers one: not both.
ORIGINAL_CHECKPOINT = re.compile(r"consolidated[^/]*\.safetensors")
# The quantization in a GGUF file's name, as llama.cpp's tools name them.
GGUF_TYPE = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.I)
GGUF_IMPORTABLE = {"Q4_0", "Q4_1", "Q8_0", "F16", "BF16", "F32"}  # inference/gguf/convert.py
GATED = (
    "this repository is gated: accept its terms on the Hub and save a token with read access"
    " in Settings"
)


class RepoRefused(ValueError):
    """The repo cannot be pulled or read; the text says why, in the user's terms."""


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    sha256: str | None  # an LFS file's content hash
    blob_id: str | None  # a regular file's git blob hash

    @classmethod
    def from_sibling(cls, sibling) -> RepoFile:
        lfs = getattr(sibling, "lfs", None)
        return cls(
            path=sibling.rfilename,
            size=int(sibling.size or (lfs.size if lfs else 0) or 0),
            sha256=lfs.sha256 if lfs else None,
            blob_id=getattr(sibling, "blob_id", None),
        )


def hub_token() -> str | None:
    """The token saved in the lab's settings; None reads public repos (and HF_TOKEN)."""
    if not token_exists():
        return None
    try:
        token = token_read()
    except TokenUnavailable:
        return None
    # One saved before tokens were checked to fit a header would fail every request.
    return token if token.isascii() and token.isprintable() else None


def reading_api() -> HfApi:
    return HfApi(endpoint=lab_settings.hf_endpoint, token=hub_token())


def offline() -> bool:
    return bool(constants.HF_HUB_OFFLINE)


def gguf_type(filename: str) -> str | None:
    found = GGUF_TYPE.findall(filename.rsplit("/", 1)[-1])
    return found[-1].upper() if found else None


def gguf_files(files: list[RepoFile]) -> list[dict]:
    """Every .gguf file with its quantization and whether the lab's importer takes it."""
    listed = []
    for file in files:
        if file.path.lower().endswith(".gguf"):
            kind = gguf_type(file.path)
            listed.append(
                {
                    "file": file.path,
                    "size_bytes": file.size,
                    "quantization": kind,
                    "importable": kind in GGUF_IMPORTABLE,
                }
            )
    return listed


def serving_files(files: list[RepoFile]) -> list[RepoFile]:
    """The files a safetensors model is served from: top-level ones, and an embedding
    model's Pooling config."""
    chosen = [
        f
        for f in files
        if ("/" not in f.path and SERVING_FILES.fullmatch(f.path))
        or SENTENCE_TRANSFORMERS_FILES.fullmatch(f.path)
    ]
    weights = [f for f in chosen if f.path.endswith(".safetensors")]
    if any(not ORIGINAL_CHECKPOINT.fullmatch(f.path) for f in weights):
        chosen = [f for f in chosen if not ORIGINAL_CHECKPOINT.fullmatch(f.path)]
    return chosen


def repo_format(files: list[RepoFile], config: dict | None, library: str | None, tags) -> str:
    """mlx (served as it is), transformers (converted), gguf (imported) or none."""
    has_weights = any(f.path.endswith(".safetensors") and "/" not in f.path for f in files)
    if has_weights:
        quantized = bool(config) and "quantization" in config
        return "mlx" if quantized or library == "mlx" or "mlx" in (tags or ()) else "transformers"
    if gguf_files(files):
        return "gguf"
    return "none"


def failure(error: Exception, repo_id: str, revision: str = "main") -> RepoRefused:
    """A client error as the reason a pull or a look failed (never the token)."""
    if isinstance(error, GatedRepoError):
        return RepoRefused(GATED)
    if isinstance(error, RevisionNotFoundError):
        return RepoRefused(f"repository {repo_id} has no revision '{revision}'")
    if isinstance(error, RepositoryNotFoundError):
        return RepoRefused(
            f"repository {repo_id} was not found on the Hub (a private one needs a token with"
            " read access saved in Settings)"
        )
    # Before EntryNotFoundError: a cache miss is one of those too.
    if isinstance(error, OfflineModeIsEnabled | LocalEntryNotFoundError):
        return RepoRefused(
            f"the Hub is not reachable offline (HF_HUB_OFFLINE) and {repo_id} is not in the"
            " local Hugging Face cache"
        )
    if isinstance(error, EntryNotFoundError):
        return RepoRefused(f"repository {repo_id} has no such file: {error}")
    if isinstance(error, HfHubHTTPError):
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status in (401, 403):
            return RepoRefused(GATED)
        server = getattr(error, "server_message", None) or str(error).splitlines()[0]
        return RepoRefused(f"the Hub answered {status}: {server}")
    return RepoRefused(f"the Hub could not be reached: {type(error).__name__}: {error}")
