"""The publish job: push what a finished job made to the Hugging Face Hub.

Runs on a Celery worker like the other jobs (kind "publish"): create the repo,
stage the files with a generated card, `upload_folder`. The upload runs on a
thread so a cancel (or the client that asked for it going away) ends the job at
once; the worker process is replaced after every job, which ends that thread too.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from jobs.context import JobCancelled, JobContext, JobParamsError, JobResult
from jobs.models import Job
from labsettings import lab_settings

from .card_evaluation import made_evaluation
from .cards import dataset_card, finetuned_model_card, quantized_model_card
from .hub import HubError, hub_api, hub_error, repo_url
from .token_store import TokenUnavailable, token_exists, token_read

SOURCE_KINDS = ("quantize", "finetune", "dataset")
POLL_SECONDS = 0.5


def artifacts_root() -> Path:
    return lab_settings.artifacts_dir.resolve()


def inside_artifacts(text: str, kind: str) -> Path:
    """The folder a source_path names: one finished `kind` job's output, or a folder in it.

    Never the artifacts directory itself, nor a job's partial folder, nor anything beside.
    """
    root = artifacts_root()
    if ".." in Path(text).parts:
        raise JobParamsError("source_path must not contain '..'")
    folder = (root / text).resolve()  # absolute paths stay absolute; links are followed
    if folder != root and root not in folder.parents:
        raise JobParamsError("source_path must be inside the lab's artifacts directory")
    if not folder.is_dir():
        raise JobParamsError(f"source_path {text} is not a folder of the artifacts directory")
    owner = folder.relative_to(root).parts[:1]
    job = Job.objects.filter(id=owner[0]).first() if owner and _is_uuid(owner[0]) else None
    if job is None or job.kind != kind or job.status != "succeeded":
        raise JobParamsError(
            f"source_path must be the output folder of a finished {kind} job "
            "(its id), or a folder inside it"
        )
    return folder


def _source_job(job_id: str, kind: str) -> Job:
    job = Job.objects.filter(id=job_id).first() if _is_uuid(job_id) else None
    if job is None:
        raise JobParamsError(f"no job {job_id}")
    if job.kind != kind:
        raise JobParamsError(f"job {job_id} is a {job.kind} job, not a {kind} job")
    if job.status != "succeeded":
        raise JobParamsError(f"job {job_id} has not succeeded (it is {job.status})")
    return job


def _is_uuid(text: str) -> bool:
    import uuid

    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _folder_of(job: Job) -> tuple[Path, tuple[str, ...]]:
    """What to push for a job, and the patterns left out of it."""
    model = job.result.get("model")
    if model:  # a quantized, fused or fully finetuned model: its registered folder
        from inference.model_registry import model_named

        record = model_named(model)
        if record is not None:
            return Path(record.path), ()
    return Path(job.artifact_path), ("fused/*", "model/*")


def validate(params: dict) -> dict:
    """`kind`, `repo_id`, `private`, and `job_id` or `source_path` (checked by the API)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    kind = params["kind"]
    try:
        validate_repo_id(params["repo_id"])
    except HFValidationError as error:
        raise JobParamsError(f"repo_id is not a valid Hub repo id: {error}") from None
    if not token_exists():
        raise JobParamsError("no Hugging Face token is saved: add one in the lab's settings")
    out = {"kind": kind, "repo_id": params["repo_id"], "private": params.get("private", False)}
    if params.get("job_id"):
        job = _source_job(params["job_id"], kind)
        folder, ignore = _folder_of(job)
        out.update(job_id=str(job.id), folder=str(folder), ignore=list(ignore))
    elif params.get("source_path"):
        out.update(folder=str(inside_artifacts(params["source_path"], kind)), ignore=[])
    else:
        raise JobParamsError("job_id or source_path required")
    out["repo_type"] = "dataset" if kind == "dataset" else "model"
    return out


def _card(params: dict, folder: Path):
    job = Job.objects.filter(id=params["job_id"]).first() if params.get("job_id") else None
    job_params, result = (job.params, job.result) if job else ({}, {})
    if params["kind"] == "dataset":
        return dataset_card(params["repo_id"], job_params, result)
    evaluated = made_evaluation(job)
    if params["kind"] == "quantize":
        return quantized_model_card(params["repo_id"], job_params, result, evaluated)
    adapter = (folder / "adapter_config.json").is_file() and not result.get("model")
    return finetuned_model_card(params["repo_id"], job_params, result, adapter, evaluated)


def _stage(params: dict, staging: Path) -> tuple[int, int]:
    """Link the files to push into `staging` (no copies), plus our card; (files, bytes)."""
    source = Path(params["folder"])
    ignored = [pattern.split("/")[0] for pattern in params["ignore"]]
    files = total = 0
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if not path.is_file() or relative.parts[0] in ignored or relative.name.startswith("."):
            continue
        if relative == Path("README.md"):  # mlx-lm writes a generic one: ours says more
            continue
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:  # another filesystem
            shutil.copy2(path, target)
        files, total = files + 1, total + path.stat().st_size
    _card(params, source).save(staging / "README.md")
    files, total = files + 1, total + (staging / "README.md").stat().st_size
    return files, total


def run(ctx: JobContext) -> JobResult:
    params = ctx.params
    try:
        api = hub_api(token_read())
    except TokenUnavailable as error:
        raise HubError(str(error)) from None
    repo_id, repo_type = params["repo_id"], params["repo_type"]
    ctx.progress(0.05, f"creating {repo_type} repo {repo_id}")
    _call(ctx, lambda: api.create_repo(
        repo_id, repo_type=repo_type, private=params["private"], exist_ok=True
    ))  # fmt: skip
    staging = ctx.workdir / "upload"
    files, size = _stage(params, staging)
    ctx.set_metrics(files=files, bytes=size, uploaded_files=0, uploaded_bytes=0)
    ctx.log(f"uploading {files} files ({size} bytes) to {repo_id}")
    ctx.progress(0.1, f"uploading {files} files ({size / 1e6:.1f} MB)")
    commit = _call(ctx, lambda: api.upload_folder(
        folder_path=staging, repo_id=repo_id, repo_type=repo_type,
        commit_message="Upload from MLX Lab",
    ))  # fmt: skip
    ctx.set_metrics(uploaded_files=files, uploaded_bytes=size)
    shutil.rmtree(staging, ignore_errors=True)  # links to the source's files: nothing to keep
    url = repo_url(repo_id, repo_type)
    ctx.log(f"pushed to {url}")
    ctx.progress(1.0, f"pushed to {url}")
    return JobResult(summary={
        "url": url, "repo_id": repo_id, "repo_type": repo_type, "private": params["private"],
        "files": files, "bytes": size, "commit": getattr(commit, "oid", None),
    })  # fmt: skip


def _call(ctx: JobContext, action):
    """Run a Hub call on a thread, checking for a cancel while it runs."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = action()
        except BaseException as error:  # handed back to the job's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="hub-call", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(POLL_SECONDS)
        try:
            ctx.check_cancelled()
        except JobCancelled:
            ctx.log("cancelled during the upload; the worker process ends it")
            raise
    if "error" in outcome:
        raise hub_error(outcome["error"]) from None
    return outcome.get("value")
