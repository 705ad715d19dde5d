"""A JobContext that keeps what a service reports, for testing services without Celery."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jobs.context import JobCancelled


@dataclass
class RecordingContext:
    params: dict
    workdir: Path
    job_id: str = "test-job"
    cancel_after_checks: int | None = None  # ask to stop after this many checks
    progress_reports: list[tuple[float, str]] = field(default_factory=list)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    checks: int = 0

    def progress(self, fraction: float, message: str = "", *, eta_seconds=None) -> None:
        assert 0.0 <= fraction <= 1.0, fraction
        self.progress_reports.append((fraction, message))
        self.check_cancelled()

    def metric(self, series: str, x: float, y: float) -> None:
        self.series.setdefault(series, []).append((x, y))

    def set_metrics(self, **values) -> None:
        self.values.update(values)

    def log(self, line: str) -> None:
        self.lines.append(line)

    def check_cancelled(self) -> None:
        self.checks += 1
        if self.cancel_after_checks is not None and self.checks > self.cancel_after_checks:
            raise JobCancelled()
