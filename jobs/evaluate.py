"""The evaluate job: registered variants (a model, with adapters or not) measured on one
evaluation set: perplexity, multiple-choice accuracy, exact match, speed and memory.

`validate` reads the whole evaluation set at POST time, so a bad line is a 400 naming
it; `run` hands over to `evaluate_scoring`, imported only then so that validating in
the web process loads no MLX. The line shapes are described in `eval_examples`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from .context import JobContext, JobParamsError, JobResult
from .eval_examples import (
    EXACT_ANSWER,
    MULTIPLE_CHOICE,
    PERPLEXITY_ONLY,
    example_kind,
    read_eval_file,
)
from .params import check_int, check_known, dataset_job_folder, registered_model
from .uploads import upload_meta, upload_path

if TYPE_CHECKING:
    from .evaluate_scoring import Score, VariantRun

MAX_VARIANTS = 4
MAX_EXAMPLES = 10_000  # also the most read from a larger set when max_examples is not set
BUILTIN = "builtin"
BUILTIN_PATH = Path(__file__).parent / "eval_sets" / "basic.jsonl"
SPLITS = ("train", "valid", "test")
DETAILS_FILE = "examples.jsonl"  # every example's score, per variant
# Keys validate() adds; accepted back (and recomputed) so validating twice is harmless.
DERIVED = ("dataset_path", "dataset_label")
KEYS = {"variants", "dataset", "max_examples", *DERIVED}
VARIANT_KEYS = {"model", "adapter", "model_path", "adapters"}


def validate(params: dict, owner=None) -> dict:
    """Check the raw params; return them normalised, with every path the run needs."""
    check_known(params, KEYS)
    variants = _variants(params.get("variants"))
    dataset, path, label = _dataset(params.get("dataset"), owner)
    read_eval_file(path)  # every line checked now: a bad one is a 400 with its number
    return {
        "variants": variants,
        "dataset": dataset,
        "max_examples": check_max_examples(params.get("max_examples")),
        "dataset_path": str(path),
        "dataset_label": label,
    }


def _variants(raw) -> list[dict]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_VARIANTS:
        raise JobParamsError(f"variants must be a list of 1 to {MAX_VARIANTS} variants")
    variants = [_variant(entry, f"variants[{index}]") for index, entry in enumerate(raw)]
    _check_one_vocabulary(variants)
    return variants


def _variant(entry, where: str) -> dict:
    if isinstance(entry, str):  # a bare model name
        entry = {"model": entry}
    if not isinstance(entry, dict):
        raise JobParamsError(f'{where} must be a model name or {{"model", "adapter"}}')
    unknown = sorted(set(entry) - VARIANT_KEYS)
    if unknown:
        raise JobParamsError(f"{where} has an unknown key '{unknown[0]}'")
    model = entry.get("model")
    if not isinstance(model, str) or not model:
        raise JobParamsError(f"{where}.model must be a model name")
    model_path, _ = registered_model(model)
    adapter, adapters = _adapters(entry.get("adapter"), model, where)
    return {"model": model, "adapter": adapter, "model_path": str(model_path), "adapters": adapters}


def _adapters(value, model: str, where: str) -> tuple[str | None, list[dict]]:
    """The adapter set as /api/adapters names it ('a+b' stacks): checked to exist and to
    belong to `model`, as the chat endpoints check a request's `adapter`."""
    from inference.models import Adapter

    if value is None or value == "none":
        return None, []
    names = [name.strip() for name in value.split("+")] if isinstance(value, str) else []
    if not names or not all(names) or len(set(names)) != len(names):
        raise JobParamsError(
            f"{where}.adapter must be an adapter name, or names joined with '+' to stack them"
        )
    adapters = []
    for name in names:
        record = Adapter.objects.filter(name=name).first()
        if record is None:
            raise JobParamsError(f"{where}.adapter '{name}' does not exist")
        if record.base_model != model:
            raise JobParamsError(
                f"{where}.adapter '{name}' was trained on {record.base_model}, not {model}"
            )
        adapters.append({"name": name, "path": record.path})
    return "+".join(names), adapters


def _check_one_vocabulary(variants: list[dict]) -> None:
    # Perplexities compare only on the same tokens. The run checks the tokens themselves;
    # a different vocabulary is caught here, before anything loads.
    sizes = {}
    for variant in variants:
        config = registered_model(variant["model"])[1]
        inner = config.get("text_config")
        inner = inner if isinstance(inner, dict) else {}
        sizes[variant["model"]] = config.get("vocab_size") or inner.get("vocab_size")
    if len(set(sizes.values())) > 1:
        described = ", ".join(f"{model} {size}" for model, size in sizes.items())
        raise JobParamsError(
            f"variants must share one tokenizer, and their vocabulary sizes differ ({described})"
        )


def _dataset(raw, owner) -> tuple[str | dict, Path, str]:
    """The dataset as normalised, its file, and how the result describes it."""
    if raw == BUILTIN:
        return BUILTIN, BUILTIN_PATH, f"builtin ({BUILTIN_PATH.name})"
    if isinstance(raw, dict) and set(raw) == {"upload"}:
        return _upload(raw["upload"], owner)
    if isinstance(raw, dict) and "job" in raw and set(raw) <= {"job", "split"}:
        return _dataset_job(raw["job"], raw.get("split", "test"))
    raise JobParamsError(
        'dataset must be "builtin", {"upload": "<upload id>"} or'
        ' {"job": "<dataset job id>", "split": "test"}'
    )


def _upload(upload_id, owner) -> tuple[dict, Path, str]:
    path, meta = upload_path(upload_id), upload_meta(upload_id)
    # Another user's upload is reported as missing, not as forbidden (as dataset jobs do).
    if owner is not None and meta.get("owner_id") not in (None, owner.pk):
        raise JobParamsError(f"upload '{upload_id}' not found")
    return {"upload": upload_id}, path, f"upload {meta.get('filename', path.name)}"


def _dataset_job(job_id, split) -> tuple[dict, Path, str]:
    if split not in SPLITS:
        raise JobParamsError(f"dataset.split must be one of {', '.join(SPLITS)}")
    path = dataset_job_folder(job_id) / f"{split}.jsonl"
    if not path.is_file():  # a split of ratio 0 gets no file
        raise JobParamsError(f"dataset.job {job_id} has no {split} split")
    return {"job": str(job_id), "split": split}, path, f"dataset job {job_id}, {split} split"


def check_max_examples(value) -> int | None:
    if value is None:
        return None
    check_int(value, "max_examples")
    if not 1 <= value <= MAX_EXAMPLES:
        raise JobParamsError(f"max_examples must be between 1 and {MAX_EXAMPLES}")
    return value


def run(ctx: JobContext) -> JobResult:
    """Score every variant on the set's first max_examples examples, in file order."""
    params = ctx.params
    dataset = (params["dataset"], Path(params["dataset_path"]), params["dataset_label"])
    summary = measure(ctx, params["variants"], dataset, params["max_examples"])
    ctx.progress(1.0, "done")
    return JobResult(summary=summary)


def measure(
    ctx: JobContext, variants: list[dict], dataset: tuple, max_examples: int | None
) -> dict:
    """The variants' figures on a checked evaluation set, `{"variants", "dataset"}`, and
    every example's score in the work folder. `dataset` is (source, file, label), as
    `validate` normalises them; a variant needs `model`, `adapter`, `model_path` and
    `adapters` (a quantize job measures its new model before it is registered)."""
    from .evaluate_scoring import bits_per_weight, evaluate_variants, variant_label

    source, path, label = dataset
    ctx.progress(0.0, "reading the evaluation set")
    available = read_eval_file(path)
    examples = available[: max_examples or MAX_EXAMPLES]
    ctx.log(f"{len(examples)} of {len(available)} examples from {label}")
    runs = evaluate_variants(ctx, variants, examples)
    figures = [variant_figures(run.variant, run.scores, run.peak_memory_bytes) for run in runs]
    for each, run in zip(figures, runs, strict=True):
        each["bits_per_weight"] = bits_per_weight(run.variant["model_path"])
        ctx.log(f"{variant_label(run.variant)}: {_describe(each)}")
    _write_details(ctx.workdir / DETAILS_FILE, runs)
    summary = _dataset_summary(source, label, examples, len(available), figures[0]["tokens"])
    return {"variants": figures, "dataset": summary}


def variant_figures(variant: dict, scores: list[Score], peak_memory_bytes: int) -> dict:
    """One variant's figures from its examples' scores."""
    nll, tokens = sum(s.nll for s in scores), sum(s.tokens for s in scores)
    seconds = sum(s.seconds for s in scores)
    loss = nll / tokens if tokens else None
    return {
        "name": variant["model"],
        "adapter": variant["adapter"],
        "perplexity": math.exp(loss) if loss is not None else None,
        "loss": loss,  # the mean token negative log-likelihood perplexity comes from
        "accuracy": _rate(scores, MULTIPLE_CHOICE),
        "exact_match": _rate(scores, EXACT_ANSWER),
        "examples": len(scores),
        "tokens": tokens,
        # What scoring ran through the model per second, as mlx-lm's perplexity reports.
        "tokens_per_second": sum(s.passed_tokens for s in scores) / seconds if seconds else None,
        "peak_memory_bytes": peak_memory_bytes,
    }


def _rate(scores: list[Score], kind: str) -> float | None:
    """The share of right answers among the examples of this kind; None if there are none."""
    answered = [s.correct for s in scores if s.kind == kind]
    return sum(answered) / len(answered) if answered else None


def _describe(figures: dict) -> str:
    parts = [f"perplexity {figures['perplexity']:.3f}" if figures["perplexity"] else "no tokens"]
    for key in ("accuracy", "exact_match"):
        if figures[key] is not None:
            parts.append(f"{key.replace('_', ' ')} {figures[key]:.2f}")
    if figures["tokens_per_second"]:
        parts.append(f"{figures['tokens_per_second']:.0f} tokens/s")
    return ", ".join(parts)


def _dataset_summary(source, label: str, examples: list[dict], available: int, tokens: int) -> dict:
    kinds = [example_kind(example) for example in examples]
    return {
        "source": source,
        "label": label,
        "examples": len(examples),
        "available": available,
        "multiple_choice": kinds.count(MULTIPLE_CHOICE),
        "exact_answer": kinds.count(EXACT_ANSWER),
        "perplexity_only": kinds.count(PERPLEXITY_ONLY),
        "tokens": tokens,  # the scored tokens, the same for every variant
    }


def _write_details(path: Path, runs: list[VariantRun]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for index, run in enumerate(runs):
            for position, s in enumerate(run.scores):
                row = {"variant": index, "example": position, **asdict(s)}
                out.write(json.dumps(row) + "\n")
