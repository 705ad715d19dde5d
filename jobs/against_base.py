"""The "evaluate against the base" action: the evaluate job's params for what a finished
quantize or finetune job made, measured beside its source model on the shipped set."""

from __future__ import annotations

from .context import JobParamsError
from .evaluate import BUILTIN
from .models import Job

SOURCES = ("quantize", "finetune")


def against_base_params(job: Job, *, max_examples: int | None = None) -> dict:
    """The raw params of an evaluation of `job`'s result (second) against its base (first)."""
    if job.kind not in SOURCES:
        raise JobParamsError(f"only a quantize or finetune job can be evaluated, not {job.kind}")
    if job.status != "succeeded":
        raise JobParamsError(f"the job has not succeeded (it is {job.status})")
    base = job.params.get("model")
    params = {"variants": [base, _made(job, base)], "dataset": BUILTIN}
    if max_examples is not None:
        params["max_examples"] = max_examples
    return params


def _made(job: Job, base: str) -> str | dict:
    made = job.result if isinstance(job.result, dict) else {}
    # A fused model stands on its own; an adapter is measured on the model it was trained on.
    if isinstance(made.get("model"), str):
        return made["model"]
    if isinstance(made.get("adapter"), str):
        return {"model": base, "adapter": made["adapter"]}
    raise JobParamsError("the job registered neither a model nor an adapter")
