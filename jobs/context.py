"""What a job's service sees of the machinery running it.

Services (quantize, finetune, dataset, evaluate) are plain functions `run(ctx) -> JobResult`.
They write only inside `ctx.workdir`, report through `ctx.progress`, and call
`ctx.check_cancelled()` between steps; the runner moves the work folder into place
and registers what it made only when `run` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class JobParamsError(ValueError):
    """Parameters a job cannot run with; the text is the 400's reason."""


class JobFailed(Exception):
    """The job cannot go on, for a reason its user can act on: the text is the job's
    error as it is shown (a refused download, a model the lab cannot serve)."""


class JobCancelled(Exception):
    """Raised by `check_cancelled` once the job has been asked to stop."""


class JobLost(JobCancelled):
    """Raised by `check_cancelled` once the job is no longer running: a watchdog failed it
    while this process was stalled or cut off. It stops like a cancelled job, but its
    row, already final, is left as it is."""


@dataclass
class JobResult:
    """What a finished job made, inside its work folder.

    `model`: register the work folder (or `model_subdir` inside it) as a model of
    this name, moved to `model_folder` first when that is set. `adapter`: register the work folder (or `adapter_subdir`) as an adapter:
    {"name", "base_model", "fine_tune_type"}. `summary`: facts shown on the job page
    and kept in Job.result (bits per weight, counts, final losses...).
    """

    summary: dict = field(default_factory=dict)
    model: str | None = None
    model_subdir: str = ""
    # Where the model folder goes instead of staying among the job's artifacts (a pulled
    # model lives under the models directory), and where it came from (repo_id, revision,
    # commit_sha), recorded with it.
    model_folder: Path | None = None
    origin: dict | None = None
    adapter: dict | None = None
    adapter_subdir: str = ""


class JobContext(Protocol):
    job_id: str
    params: dict  # as returned by the kind's validate()
    workdir: Path  # empty, private to this run; removed if the job fails or is cancelled

    def progress(
        self, fraction: float, message: str = "", *, eta_seconds: float | None = None
    ) -> None:
        """Report progress (0..1); also checks for cancellation."""

    def metric(self, series: str, x: float, y: float) -> None:
        """Append the point (x, y) to a plotted series, e.g. "train_loss"."""

    def set_metrics(self, **values) -> None:
        """Set single-value metrics, e.g. tokens_per_second=..., peak_memory_gb=..."""

    def log(self, line: str) -> None:
        """Append a line to the job's log tail."""

    def check_cancelled(self) -> None:
        """Raise JobCancelled if the job was asked to stop."""


class StageContext:
    """A job's context for one stage of it: progress 0..1 of the stage is reported as
    `start` + that share of `span` of the job (a quantize job's evaluation, its last part)."""

    def __init__(self, ctx: JobContext, start: float, span: float) -> None:
        self._ctx, self._start, self._span = ctx, start, span

    def progress(
        self, fraction: float, message: str = "", *, eta_seconds: float | None = None
    ) -> None:
        self._ctx.progress(self._start + self._span * fraction, message, eta_seconds=eta_seconds)

    def __getattr__(self, name: str):  # the rest is the job's own
        return getattr(self._ctx, name)
