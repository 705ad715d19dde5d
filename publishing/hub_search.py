"""Searching the Hub for models: `HfApi.list_models`, MLX-ready repos first, each result
told servable or not by its own config.json against the installed mlx-lm."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from huggingface_hub import hf_hub_download

from inference.protocol.media import config_media
from labsettings import lab_settings

from .hub_repos import (
    RepoFile,
    failure,
    gguf_files,
    hub_token,
    offline,
    reading_api,
    repo_format,
    serving_files,
)
from .servable import architecture_problem, text_only_reason

SORTS = ("downloads", "likes", "last_modified", "created_at", "trending_score")
LIST_FIELDS = [
    "downloads", "likes", "lastModified", "gated", "pipeline_tag", "library_name", "tags", "sha",
]  # fmt: skip
LOOKUPS = 8  # repos described at once: two small requests each
OFFLINE = (
    "the lab is offline (HF_HUB_OFFLINE): searching needs the Hub; a repo already in the"
    " local Hugging Face cache can still be pulled"
)

# A repo's description at one commit never changes: kept until the process ends.
_described: dict[tuple[str, str], dict] = {}
_lock = threading.Lock()


def search_models(
    *, search: str, author: str, library: str, pipeline_tag: str, sort: str, limit: int
) -> dict:
    """`{"offline": bool, "results": [...]}`; RepoRefused when the Hub cannot be asked."""
    if offline():
        return {"offline": True, "detail": OFFLINE, "results": []}
    api = reading_api()
    query = {
        "search": search or None, "author": author or None, "pipeline_tag": pipeline_tag or None,
        "sort": sort, "limit": limit, "expand": LIST_FIELDS,
    }  # fmt: skip
    try:
        found = list(api.list_models(filter=library or "mlx", **query))
        if not library:  # MLX-ready repos first, then the rest of the Hub's answer
            seen = {m.id for m in found}
            found += [m for m in api.list_models(**query) if m.id not in seen]
    except Exception as error:
        raise failure(error, search or "the Hub") from None
    found = found[:limit]
    with ThreadPoolExecutor(LOOKUPS) as pool:
        results = list(pool.map(_result, found))
    return {"offline": False, "results": results}


def _result(model) -> dict:
    last_modified = getattr(model, "last_modified", None)
    summary = {
        "id": model.id,
        "downloads": model.downloads or 0,
        "likes": model.likes or 0,
        "last_modified": last_modified.isoformat() if last_modified else None,
        "gated": model.gated or False,
        "pipeline_tag": model.pipeline_tag,
        "library": model.library_name,
    }
    return summary | describe_repo(model.id, model.sha, model.library_name, model.tags)


def describe_repo(repo_id: str, sha: str | None, library: str | None, tags) -> dict:
    """Size, format, GGUF files and whether the installed mlx-lm can serve the repo."""
    key = (repo_id, sha or "")
    if sha and key in _described:
        return _described[key]
    try:
        described = _describe(repo_id, library, tags)
    except Exception as error:  # gated, private, gone: the reason is the answer
        return {
            "size_bytes": None, "format": None, "model_type": None, "gguf_files": [],
            "servable": False, "reason": str(failure(error, repo_id)),
        }  # fmt: skip
    with _lock:
        if sha:
            _described[key] = described
    return described


def _describe(repo_id: str, library, tags) -> dict:
    api = reading_api()
    info = api.model_info(repo_id, files_metadata=True)
    files = [RepoFile.from_sibling(s) for s in info.siblings or []]
    config = _config(repo_id, info.sha) if any(f.path == "config.json" for f in files) else None
    kind = repo_format(files, config, library or info.library_name, tags or info.tags)
    ggufs = gguf_files(files)
    described = {
        "format": kind,
        "model_type": (config or {}).get("model_type"),
        "gguf_files": ggufs,
        "size_bytes": sum(f.size for f in serving_files(files)) if kind != "gguf" else None,
    }
    return described | _servable(kind, config, ggufs)


def _servable(kind: str, config: dict | None, ggufs: list[dict]) -> dict:
    if kind == "gguf":
        if any(g["importable"] for g in ggufs):
            return {
                "servable": True,
                "reason": "a GGUF file the lab imports (Q4_0, Q4_1, Q8_0, F16)",
            }
        kinds = ", ".join(sorted({g["quantization"] or "?" for g in ggufs}))
        return {
            "servable": False,
            "reason": f"its GGUF files are {kinds}: the lab imports Q4_0, Q4_1, Q8_0 and float files",
        }
    if kind == "none":
        return {"servable": False, "reason": "no safetensors weights and no GGUF files"}
    if config is None:
        return {"servable": False, "reason": "no config.json"}
    problem = architecture_problem(config)
    if problem:
        return {"servable": False, "reason": problem}
    how = "served as it is" if kind == "mlx" else "converted to MLX when pulled"
    if config_media(config):
        how = f"takes images (mlx-vlm), {how}"
    elif text_only := text_only_reason(config):
        how = f"{text_only}, {how}"
    return {"servable": True, "reason": f"{config.get('model_type')}: {how}"}


def _config(repo_id: str, sha: str) -> dict | None:
    # Only config.json, through the client's cache: a second search reads it from disk.
    path = hf_hub_download(
        repo_id, "config.json", revision=sha, endpoint=lab_settings.hf_endpoint,
        token=hub_token(),
    )  # fmt: skip
    try:
        config = json.loads(Path(path).read_text())
    except ValueError:
        return None
    return config if isinstance(config, dict) else None
