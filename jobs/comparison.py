"""The comparison page's figures: an evaluation's variants side by side, the first one
(the base) marked, each other's difference from it, and bars for a plot.

Pure functions over a stored result (no MLX, no database): the page renders what
`comparison()` returns, and the tests read it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LOWER, HIGHER = "lower", "higher"  # which way is better


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    better: str
    unit: str = ""  # "rate": a 0-1 share shown as a percentage; "bytes": shown in MiB


METRICS = (
    Metric("perplexity", "Perplexity", LOWER),
    Metric("accuracy", "Multiple-choice accuracy", HIGHER, "rate"),
    Metric("exact_match", "Exact match", HIGHER, "rate"),
    Metric("bits_per_weight", "Bits per weight", LOWER),
    Metric("tokens_per_second", "Scoring tokens/s", HIGHER),
    Metric("peak_memory_bytes", "Peak memory", LOWER, "bytes"),
)
MIB = 1 << 20
# The plot's layout, in percent of its width, and each bar's row height in pixels.
LABEL_SHARE, BAR_SHARE, ROW_PIXELS = 34, 52, 26


@dataclass
class Cell:
    text: str  # the value, formatted; "—" when the variant has none
    difference: str = ""  # from the base, formatted; empty for the base itself
    verdict: str = ""  # "better", "worse" or "same" than the base; empty when unknown


@dataclass
class Bar:
    label: str
    text: str
    percent: float  # of the widest bar of its metric
    base: bool
    y: int = 0  # the bar's row in its plot, in pixels

    @property
    def width(self) -> float:
        """The bar's width as a share of the plot's width (the labels take the left)."""
        return round(self.percent * BAR_SHARE / 100, 2)

    @property
    def text_x(self) -> float:
        return round(LABEL_SHARE + self.width + 1, 2)


@dataclass
class Comparison:
    variants: list[dict]
    metrics: tuple[Metric, ...]
    rows: list[dict] = field(default_factory=list)  # per variant: label, base, cells
    plots: list[dict] = field(default_factory=list)  # per metric: label, better, bars
    dataset: dict = field(default_factory=dict)


def variant_label(figures: dict) -> str:
    name = str(figures.get("name") or "?")
    return f"{name} + {figures['adapter']}" if figures.get("adapter") else name


def evaluates(job) -> bool:
    """Whether the job measures variants: an evaluate job, or a quantize job asked to."""
    return job.kind == "evaluate" or (job.kind == "quantize" and bool(job.params.get("evaluate")))


def evaluation_of(job) -> dict | None:
    """The evaluation a succeeded job carries: an evaluate job's result, or the one a
    quantize job ran on its result (`result["evaluation"]`); None otherwise."""
    if job.status != "succeeded" or not isinstance(job.result, dict):
        return None
    evaluation = job.result if job.kind == "evaluate" else job.result.get("evaluation")
    if not isinstance(evaluation, dict) or not isinstance(evaluation.get("variants"), list):
        return None
    variants = [v for v in evaluation["variants"] if isinstance(v, dict)]
    return {**evaluation, "variants": variants} if variants else None


def comparison(evaluation: dict) -> Comparison:
    """The table and the plots of an evaluation whose first variant is the base."""
    variants = evaluation["variants"]
    metrics = tuple(m for m in METRICS if any(_number(v.get(m.key)) for v in variants))
    base = variants[0]
    result = Comparison(variants, metrics, dataset=evaluation.get("dataset") or {})
    for index, figures in enumerate(variants):
        cells = [_cell(m, figures.get(m.key), base.get(m.key), index == 0) for m in metrics]
        result.rows.append({"label": variant_label(figures), "base": index == 0, "cells": cells})
    result.plots = [_plot(metric, variants) for metric in metrics]
    return result


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(metric: Metric, value, base, is_base: bool) -> Cell:
    if not _number(value):
        return Cell("—")
    cell = Cell(format_value(metric, value))
    if is_base or not _number(base):
        return cell
    cell.difference = format_difference(metric, value, base)
    cell.verdict = verdict(metric, value, base)
    return cell


def format_value(metric: Metric, value: float) -> str:
    if metric.unit == "rate":
        return f"{value * 100:.1f}%"
    if metric.unit == "bytes":
        return f"{value / MIB:.0f} MiB"
    if metric.key == "tokens_per_second":
        return f"{value:.0f}"
    return f"{value:.3f}" if metric.key == "perplexity" else f"{value:.2f}"


def format_difference(metric: Metric, value: float, base: float) -> str:
    change = value - base
    if metric.unit == "rate":  # percentage points: a share's change is not a ratio
        return f"{change * 100:+.1f} pts"
    relative = f" ({change / base * 100:+.1f}%)" if base else ""
    if metric.unit == "bytes":
        return f"{change / MIB:+.0f} MiB{relative}"
    digits = 3 if metric.key == "perplexity" else 0 if metric.key == "tokens_per_second" else 2
    return f"{change:+.{digits}f}{relative}"


def verdict(metric: Metric, value: float, base: float) -> str:
    if value == base:
        return "same"
    return "better" if (value < base) == (metric.better == LOWER) else "worse"


def _plot(metric: Metric, variants: list[dict]) -> dict:
    values = [v.get(metric.key) for v in variants]
    widest = max((abs(value) for value in values if _number(value)), default=0) or 1
    bars = [
        Bar(
            label=variant_label(figures),
            text=format_value(metric, value) if _number(value) else "—",
            percent=round(abs(value) / widest * 100, 1) if _number(value) else 0.0,
            base=index == 0,
            y=index * ROW_PIXELS,
        )
        for index, (figures, value) in enumerate(zip(variants, values, strict=True))
    ]
    return {
        "key": metric.key, "label": metric.label, "better": metric.better, "bars": bars,
        "height": len(bars) * ROW_PIXELS, "label_x": LABEL_SHARE,
    }  # fmt: skip
