"""Each job kind's service: `validate(params)` at submission, `run(ctx)` on a worker.

Services are imported when first used, so the web process does not load the
training stack just to list jobs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .context import JobParamsError

KINDS = ("pull", "quantize", "finetune", "dataset", "evaluate")  # what POST /api/jobs takes
_MODULES = {
    "pull": "jobs.pull",
    "quantize": "jobs.quantize",
    "finetune": "jobs.finetune",
    "dataset": "jobs.datasets",
    "evaluate": "jobs.evaluate",
    "publish": "publishing.push",  # submitted by the push endpoints only
}
# Kinds that read the submitter's own things (conversations, uploads): they get the owner.
OWNED_SOURCES = ("dataset", "evaluate")


def service(kind: str) -> ModuleType:
    """The module running a job kind (publish included: it runs like the others)."""
    if kind not in _MODULES:
        raise JobParamsError(f"kind must be one of {', '.join(KINDS)}")
    return importlib.import_module(_MODULES[kind])


def validate(kind: str, params, owner=None) -> dict:
    """The kind's normalised parameters, or a JobParamsError saying what is wrong."""
    if kind not in KINDS:
        raise JobParamsError(f"kind must be one of {', '.join(KINDS)}")
    module = service(kind)
    if not isinstance(params, dict):
        raise JobParamsError("params must be an object")
    if kind in OWNED_SOURCES:
        return module.validate(params, owner=owner)
    return module.validate(params)
