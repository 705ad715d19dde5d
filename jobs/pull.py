"""The pull job: a model from the Hugging Face Hub, downloaded, made servable, registered.

`POST /api/jobs {"kind": "pull", "params": {"repo_id": "org/name", "revision": "main",
"name": ..., "quantize": {"bits": 4, "group_size": 64}, "gguf_file": ...}}`.

Before a byte of weights: the repo's files and commit from the Hub, its config.json
checked against the installed mlx-lm, the disk checked for room. Then the files serving
needs (hub_download.py: they resume across attempts, and each is checked against the
Hub's hash), into `<models_dir>/.downloads/<repo>/<commit>`, where a killed or cancelled
pull leaves them for the next one. An MLX repo is served as it came; a transformers one
goes through mlx-lm's convert (quantized when asked); a GGUF file through our importer.
The model lands in `<models_dir>/<name>/<commit>` and the registry row records the repo
and commit, so a later pull of a newer commit replaces it in one update.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from labsettings import lab_settings

from . import quantize
from .context import JobContext, JobFailed, JobParamsError, JobResult
from .params import NAME_PATTERN, check_known, claimed_by_a_job, required_string

KEYS = {"repo_id", "revision", "name", "quantize", "gguf_file"}
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
REVISION = re.compile(r"[\w./-]{1,200}")
MODEL_SUBDIR = "model"
DOWNLOAD_SHARE = 0.85  # of the progress bar, when a conversion follows


def validate(params: dict) -> dict:
    check_known(params, KEYS)
    repo_id = required_string(params, "repo_id")
    if not REPO_ID.fullmatch(repo_id) or ".." in repo_id:
        raise JobParamsError("repo_id must look like 'org/name' (a Hugging Face model repo)")
    revision = params.get("revision") or "main"
    if not isinstance(revision, str) or not REVISION.fullmatch(revision) or ".." in revision:
        raise JobParamsError("revision must be a branch, tag or commit of the repo")
    gguf_file = params.get("gguf_file")
    if gguf_file is not None and (
        not isinstance(gguf_file, str) or not gguf_file.lower().endswith(".gguf")
        or ".." in gguf_file or gguf_file.startswith("/")
    ):  # fmt: skip
        raise JobParamsError("gguf_file must name a .gguf file of the repo")
    quantization = _quantization(params.get("quantize"))
    if quantization and gguf_file:
        raise JobParamsError("quantize applies to safetensors models, not to a GGUF file")
    name = params.get("name") or default_name(repo_id, quantization)
    _check_name(name, repo_id)
    return {
        "repo_id": repo_id, "revision": revision, "name": name,
        "quantize": quantization, "gguf_file": gguf_file,
    }  # fmt: skip


def default_name(repo_id: str, quantization: dict | None) -> str:
    name = re.sub(r"[^a-z0-9_-]+", "-", repo_id.split("/")[-1].lower()).strip("-") or "model"
    if quantization:
        name += f"-q{quantization['bits']}" if quantization["bits"] else "-mixed"
    return name[:200]


def _quantization(value) -> dict | None:
    if value is None or value is False:
        return None
    if not isinstance(value, dict):
        raise JobParamsError('quantize must be an object such as {"bits": 4, "group_size": 64}')
    check_known(value, {"bits", "group_size", "mode", "recipe"})
    return quantize.quantization(value)


def _check_name(name, repo_id: str) -> None:
    from inference.model_registry import model_named

    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise JobParamsError(
            "name must be 1-200 characters of lower-case letters, digits, '-' or '_'"
        )
    held = model_named(name)
    if held is not None and held.repo_id != repo_id:
        raise JobParamsError(
            f"name '{name}' is already a model in the registry (not pulled from {repo_id}):"
            " choose another name"
        )
    if claimed_by_a_job(name):
        raise JobParamsError(f"name '{name}' is what another unfinished job will register")


def run(ctx: JobContext) -> JobResult:
    from publishing import hub_pull
    from publishing.hub_repos import RepoRefused

    params, started = ctx.params, time.monotonic()
    ctx.progress(0.0, f"asking the Hub about {params['repo_id']}")
    try:
        plan = hub_pull.plan_pull(
            params["repo_id"], params["revision"], params["gguf_file"],
            converting=bool(params["quantize"]),
        )  # fmt: skip
        ctx.log(f"{params['repo_id']} at {plan.commit}: {plan.format}, {len(plan.files)} files")
        converts = plan.format != "mlx" or bool(params["quantize"])
        share = DOWNLOAD_SHARE if converts else 0.98
        received = hub_pull.fetch(plan, ctx, share)
    except RepoRefused as error:
        raise JobFailed(str(error)) from None
    made = ctx.workdir / MODEL_SUBDIR
    _make_servable(ctx, plan, made, share)
    shutil.rmtree(plan.folder, ignore_errors=True)  # its bytes live on in the model
    summary = {
        "repo_id": params["repo_id"], "revision": params["revision"], "commit": plan.commit,
        "format": plan.format, "files": len(plan.files), "download_bytes": plan.total_bytes,
        "bytes_received": received, "quantize": params["quantize"],
        "gguf_file": plan.gguf_file, "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    ctx.progress(1.0, "done")
    return JobResult(
        summary=summary,
        model=params["name"],
        model_subdir=MODEL_SUBDIR,
        model_folder=lab_settings.models_dir / params["name"] / plan.commit[:12],
        origin={
            "repo_id": params["repo_id"],
            "revision": params["revision"],
            "commit_sha": plan.commit,
        },  # fmt: skip
    )


def _make_servable(ctx: JobContext, plan, made: Path, share: float) -> None:
    params = ctx.params
    encoder = plan.format != "gguf" and _is_encoder(plan.folder)
    if encoder and params["quantize"]:
        raise JobFailed("an encoder embedding model is served as it is: pull it without quantize")
    if plan.format == "gguf":
        _import_gguf(ctx, plan.folder / plan.gguf_file, made, share)
    elif encoder:  # mlx-embeddings loads transformers' weights as they are
        shutil.move(plan.folder, made)
    elif params["quantize"]:
        _convert(ctx, plan.folder, made, params, share)
    elif plan.format == "transformers":
        ctx.progress(share, "converting to MLX with mlx-lm")
        quantize.convert(hf_path=str(plan.folder), mlx_path=str(made))
    else:  # MLX already: served as it came (a rename where the two share a disk)
        shutil.move(plan.folder, made)
    _keep_serving_files(plan.folder, made)


def _is_encoder(folder: Path) -> bool:
    from inference.protocol.embedding_folder import ENCODER, embedding_support

    spec = embedding_support(folder).spec
    return spec is not None and spec.backend == ENCODER


def _convert(ctx: JobContext, source: Path, made: Path, params: dict, share: float) -> None:
    options = {**params["quantize"], "dequantize": False, "model": params["repo_id"]}
    stages = quantize.conversion_plan(options, source, ctx.workdir)
    try:
        for index, (message, kwargs) in enumerate(stages):
            ctx.progress(share + (0.98 - share) * index / len(stages), message)
            ctx.log(message)
            quantize.convert(**kwargs)
            ctx.check_cancelled()
    finally:
        shutil.rmtree(ctx.workdir / quantize.FLOAT_SUBDIR, ignore_errors=True)


def _import_gguf(ctx: JobContext, gguf: Path, made: Path, share: float) -> None:
    from inference.engine.process.startup import prepare_mlx_process

    prepare_mlx_process()  # before gguf's mlx.core: the optimized BLAS goes under MLX
    from inference.gguf.convert import GGUFImportError, import_gguf

    def progress(fraction: float, message: str) -> None:
        ctx.progress(share + (0.98 - share) * fraction, message)

    try:
        import_gguf(gguf, made, progress)
    except GGUFImportError as error:
        raise JobFailed(f"{gguf.name} cannot be imported: {error}") from None


def _keep_serving_files(source: Path, made: Path) -> None:
    # mlx-lm's convert writes config, tokenizer and weights; the model's sampling defaults,
    # a separate chat template and an embedding model's pooling (without which it would
    # be served as a chat model) would be lost without this.
    from publishing.hub_repos import SENTENCE_TRANSFORMERS_FILES

    if not source.is_dir():
        return
    kept = [p.relative_to(source) for p in source.rglob("*.json")]
    kept = [p for p in kept if SENTENCE_TRANSFORMERS_FILES.fullmatch(p.as_posix())]
    for name in (Path("generation_config.json"), Path("chat_template.jinja"), *kept):
        if (source / name).is_file() and not (made / name).exists():
            (made / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / name, made / name)
