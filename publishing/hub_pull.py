"""A pull's two halves on the Hub's side: what to fetch (plan_pull) and fetching it (fetch).

plan_pull refuses before any weights move: a gated or missing repo, an architecture the
installed mlx-lm cannot load, a disk without room. Offline (HF_HUB_OFFLINE), the repo
comes from the local Hugging Face cache instead, through the client's own lookup.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from huggingface_hub import snapshot_download

from labsettings import lab_settings

from .hub_download import download, part_bytes
from .hub_repos import (
    RepoFile,
    RepoRefused,
    failure,
    gguf_files,
    hub_token,
    offline,
    reading_api,
    repo_format,
    serving_files,
)
from .servable import architecture_problem

# What an offline pull takes from the cache: serving_files() picks among these.
CACHED_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


@dataclass
class PullPlan:
    repo_id: str
    commit: str
    format: str  # mlx | transformers | gguf
    files: list[RepoFile]
    folder: Path  # where the files gather, kept across attempts
    gguf_file: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def downloads_dir(repo_id: str, commit: str) -> Path:
    return lab_settings.models_dir / ".downloads" / repo_id.replace("/", "--") / commit


def plan_pull(repo_id: str, revision: str, gguf_file: str | None, converting: bool) -> PullPlan:
    """What to fetch of `repo_id` at `revision`; RepoRefused says why it cannot be."""
    if offline():
        return _cached_plan(repo_id, revision, gguf_file)
    try:
        info = reading_api().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as error:
        raise failure(error, repo_id, revision) from None
    files = [RepoFile.from_sibling(s) for s in info.siblings or []]
    plan = PullPlan(repo_id, info.sha, "", files, downloads_dir(repo_id, info.sha))
    return _choose(plan, gguf_file, converting, info.library_name, info.tags)


def _choose(plan: PullPlan, gguf_file, converting: bool, library, tags) -> PullPlan:
    """The plan's format and files, with the architecture and the disk checked."""
    plan.folder.mkdir(parents=True, exist_ok=True)
    config = None
    if gguf_file is None and any(f.path == "config.json" for f in plan.files):
        config = _config(plan)
    plan.format = "gguf" if gguf_file else repo_format(plan.files, config, library, tags)
    if plan.format == "gguf":
        plan.gguf_file = _gguf_choice(plan, gguf_file)
        plan.files = [f for f in plan.files if f.path == plan.gguf_file]
    elif plan.format == "none":
        raise RepoRefused(
            f"{plan.repo_id} has neither safetensors weights nor GGUF files the lab can serve"
        )
    else:
        if config is None:
            raise RepoRefused(f"{plan.repo_id} has safetensors weights but no config.json")
        if problem := architecture_problem(config):
            raise RepoRefused(f"{plan.repo_id} cannot be served here: {problem}")
        plan.files = serving_files(plan.files)
    _check_room(plan, converting or plan.format != "mlx")
    return plan


def _config(plan: PullPlan) -> dict:
    config_file = [f for f in plan.files if f.path == "config.json"]
    _download(plan, config_file, lambda n: None)
    try:
        config = json.loads((plan.folder / "config.json").read_text())
    except ValueError:
        raise RepoRefused(f"{plan.repo_id}'s config.json is not valid JSON") from None
    return config if isinstance(config, dict) else {}


def _gguf_choice(plan: PullPlan, gguf_file: str | None) -> str:
    listed = gguf_files(plan.files)
    names = ", ".join(f"{g['file']} ({g['quantization'] or '?'})" for g in listed) or "none"
    if gguf_file is not None:
        if not any(g["file"] == gguf_file for g in listed):
            raise RepoRefused(f"{plan.repo_id} has no file {gguf_file}; its GGUF files: {names}")
        return gguf_file
    importable = [g["file"] for g in listed if g["importable"]]
    if len(listed) == 1 or len(importable) == 1:
        return (importable or [listed[0]["file"]])[0]
    raise RepoRefused(f"{plan.repo_id} has several GGUF files: choose one ({names})")


def _check_room(plan: PullPlan, converting: bool) -> None:
    missing = plan.total_bytes - part_bytes(plan.folder, plan.files)
    weights = sum(f.size for f in plan.files if f.path.endswith((".safetensors", ".gguf")))
    needed = missing + (weights if converting else 0)  # a conversion writes its own copy
    free = shutil.disk_usage(plan.folder).free
    if needed > free:
        raise RepoRefused(
            f"needs {human_bytes(needed)}, {human_bytes(free)} free under {_shown(plan.folder)}"
        )


def _shown(folder: Path) -> str:
    models = lab_settings.models_dir
    try:
        return str(models.resolve().relative_to(Path(settings.BASE_DIR).resolve()))
    except ValueError:
        return str(models)


def human_bytes(count: float) -> str:
    """As the lab's pages write sizes (util.js formatBytes): steps of 1024."""
    units = ("B", "KB", "MB", "GB", "TB")
    unit = 0
    while abs(count) >= 1024 and unit < len(units) - 1:
        count /= 1024
        unit += 1
    digits = 2 if unit >= 3 else 0 if unit == 0 else 1
    return f"{count:.{digits}f} {units[unit]}"


def _cached_plan(repo_id: str, revision: str, gguf_file: str | None) -> PullPlan:
    """The repo as the local Hugging Face cache holds it, copied into the downloads folder."""
    patterns = [gguf_file] if gguf_file else [*CACHED_PATTERNS, "*.gguf"]
    try:
        snapshot = Path(
            snapshot_download(
                repo_id, revision=revision, allow_patterns=patterns, local_files_only=True
            )
        )
    except Exception as error:
        raise failure(error, repo_id, revision) from None
    files = [
        RepoFile(str(p.relative_to(snapshot)), p.stat().st_size, None, None)
        for p in sorted(snapshot.rglob("*"))
        if p.is_file()
    ]
    plan = PullPlan(repo_id, snapshot.name, "", files, downloads_dir(repo_id, snapshot.name))
    plan.folder.mkdir(parents=True, exist_ok=True)
    for file in files:  # the cache's files were checked when the client fetched them
        target = plan.folder / file.path
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(snapshot / file.path, target)
    info_tags = ("mlx",) if _looks_mlx(plan.folder) else ()
    return _choose(plan, gguf_file, False, None, info_tags)


def _looks_mlx(folder: Path) -> bool:
    try:
        return "quantization" in json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False


def _link_or_copy(source: Path, target: Path) -> None:
    real = source.resolve()  # the cache's snapshot files link to its blobs
    try:
        os.link(real, target)
    except OSError:
        shutil.copyfile(real, target)


def _download(plan: PullPlan, files: list[RepoFile], on_bytes) -> int:
    if offline():
        return 0  # copied from the cache by _cached_plan
    try:
        return download(
            endpoint=lab_settings.hf_endpoint, repo_id=plan.repo_id, commit=plan.commit,
            files=files, folder=plan.folder, token=hub_token(), on_bytes=on_bytes,
        )  # fmt: skip
    except RepoRefused:
        raise
    except Exception as error:
        if type(error).__module__.startswith("huggingface_hub"):
            raise failure(error, plan.repo_id) from None
        raise


class Meter:
    """Bytes, speed and time left of a download, reported on the job as it goes."""

    WINDOW = 5.0  # seconds of history the speed is measured over

    def __init__(self, ctx, total: int, done: int, share: float) -> None:
        self.ctx, self.total, self.done, self.share = ctx, total, done, share
        self.samples: list[tuple[float, int]] = [(time.monotonic(), done)]

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        self.samples.append((now, self.done))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.WINDOW:
            self.samples.pop(0)
        self.report()

    def speed(self) -> float:
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def report(self) -> None:
        speed = self.speed()
        left = self.total - self.done
        eta = left / speed if speed > 0 else None
        self.ctx.set_metrics(
            bytes_done=self.done, bytes_total=self.total, bytes_per_second=round(speed)
        )
        message = f"{human_bytes(self.done)} of {human_bytes(self.total)}"
        if speed > 0:
            message += f" at {human_bytes(speed)}/s"
        fraction = self.done / self.total if self.total else 1.0
        self.ctx.progress(self.share * fraction, message, eta_seconds=eta)


def fetch(plan: PullPlan, ctx, share: float) -> int:
    """Download the plan's files, reporting progress on the job; bytes received."""
    meter = Meter(ctx, plan.total_bytes, part_bytes(plan.folder, plan.files), share)
    meter.report()
    received = _download(plan, plan.files, meter)
    ctx.log(f"received {human_bytes(received)} of {human_bytes(plan.total_bytes)}")
    return received
