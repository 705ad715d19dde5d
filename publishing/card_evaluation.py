"""Evaluation figures in a pushed model's card: the Hub's `model-index` metadata (task,
dataset, metrics per result, as huggingface_hub's EvalResult writes them) and a table of
the model beside the base it was measured against."""

from __future__ import annotations

from huggingface_hub import EvalResult

from jobs.comparison import evaluation_of, variant_label
from jobs.models import Job

RECENT_EVALUATIONS = 200  # how far back an evaluation of a pushed model is looked for
# (result key, metric type as the Hub's metadata names it, the card's name for it)
METRICS = (
    ("perplexity", "perplexity", "Perplexity"),
    ("accuracy", "accuracy", "Multiple-choice accuracy"),
    ("exact_match", "exact_match", "Exact match"),
)
BUILTIN_DATASET = "mlx-lab/basic-eval"  # the shipped set has no Hub id: a stable name


def made_evaluation(job: Job | None) -> tuple[dict, int] | None:
    """The evaluation of what `job` made and its variant's index: the job's own (a quantize
    job asked to evaluate), else the newest succeeded evaluate job that measured it."""
    if job is None or not isinstance(job.result, dict):
        return None
    target = _made_variant(job)
    if target is None:
        return None
    own = evaluation_of(job)
    candidates = [own] if own else []
    recent = Job.objects.filter(kind="evaluate", status="succeeded").order_by("-finished_at")
    candidates += [evaluation_of(other) for other in recent[:RECENT_EVALUATIONS]]
    for evaluation in filter(None, candidates):
        for index, figures in enumerate(evaluation["variants"]):
            if (figures.get("name"), figures.get("adapter")) == target:
                return evaluation, index
    return None


def _made_variant(job: Job) -> tuple[str, str | None] | None:
    made = job.result
    if isinstance(made.get("model"), str):
        return made["model"], None
    if isinstance(made.get("adapter"), str) and isinstance(job.params.get("model"), str):
        return job.params["model"], made["adapter"]
    return None


def eval_results(evaluation: dict, index: int) -> list[EvalResult]:
    """The model-index results of the variant at `index`: one per figure it has."""
    figures, dataset = evaluation["variants"][index], evaluation.get("dataset") or {}
    builtin = dataset.get("source") == "builtin"
    return [
        EvalResult(
            task_type="text-generation",
            dataset_type=BUILTIN_DATASET if builtin else "custom",
            dataset_name=str(dataset.get("label") or "evaluation set"),
            metric_type=metric_type,
            metric_name=name,
            metric_value=round(figures[key], 4),
        )
        for key, metric_type, name in METRICS
        if isinstance(figures.get(key), int | float)
    ]


def evaluation_section(evaluation: dict, index: int) -> str:
    """A Markdown table of this model beside the other variants (the base first)."""
    dataset = evaluation.get("dataset") or {}
    columns = [(key, name) for key, _, name in METRICS] + [("bits_per_weight", "Bits per weight")]
    header = "| Variant | " + " | ".join(name for _, name in columns) + " |"
    rows = [header, "|---|" + "---:|" * len(columns)]
    for position, figures in enumerate(evaluation["variants"]):
        label = f"`{variant_label(figures)}`"
        if position == 0:
            label += " (base)"
        if position == index:
            label = f"**this model** ({label})" if position else f"**this model**, {label}"
        cells = [_figure(figures.get(key), key) for key, _ in columns]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    measured = (
        f"Measured by MLX Lab on {dataset.get('label', 'an evaluation set')}:"
        f" {dataset.get('examples', '?')} examples, the same tokens for every variant."
    )
    return "## Evaluation\n\n" + measured + "\n\n" + "\n".join(rows) + "\n"


def _figure(value, key: str) -> str:
    if not isinstance(value, int | float):
        return "—"
    if key in ("accuracy", "exact_match"):
        return f"{value * 100:.1f}%"
    return f"{value:.3f}" if key == "perplexity" else f"{value:.2f}"
