"""A quantize job's own evaluation: its new model beside its source on the shipped set,
in the same job, before the new model is registered (`"evaluate": true` or
`{"max_examples": N}`); the perplexity change is reported with the result."""

from __future__ import annotations

from pathlib import Path

from .context import JobContext, JobParamsError, StageContext
from .evaluate import BUILTIN, BUILTIN_PATH, check_max_examples

KEYS = {"max_examples"}
STAGE_START = 0.6  # the job's progress when the evaluation starts: converting is quicker


def normalise(value) -> dict | None:
    """The `evaluate` param: None for no evaluation, else `{"max_examples": N or None}`."""
    if value is None or value is False:
        return None
    if value is True:
        return {"max_examples": None}
    if not isinstance(value, dict) or set(value) - KEYS:
        raise JobParamsError('evaluate must be true, false or {"max_examples": N}')
    return {"max_examples": check_max_examples(value.get("max_examples"))}


def evaluate_result(ctx: JobContext, params: dict, source: Path, made: Path) -> dict:
    """The evaluation's figures (`{"variants", "dataset"}`, source first) and its
    perplexity change, `{"source", "result", "change", "change_percent"}`."""
    from .evaluate import measure

    variants = [_variant(params["model"], source), _variant(params["name"], made)]
    stage = StageContext(ctx, STAGE_START, 0.95 - STAGE_START)
    dataset = (BUILTIN, BUILTIN_PATH, f"builtin ({BUILTIN_PATH.name})")
    evaluation = measure(stage, variants, dataset, params["evaluate"]["max_examples"])
    return {"evaluation": evaluation, "perplexity": perplexity_change(evaluation)}


def _variant(name: str, folder: Path) -> dict:
    return {"model": name, "adapter": None, "model_path": str(folder), "adapters": []}


def perplexity_change(evaluation: dict) -> dict | None:
    before, after = (variant.get("perplexity") for variant in evaluation["variants"][:2])
    if before is None or after is None:
        return None  # a set with no scored tokens
    change = after - before
    return {
        "source": round(before, 4),
        "result": round(after, 4),
        "change": round(change, 4),
        "change_percent": round(change / before * 100, 2),
    }
