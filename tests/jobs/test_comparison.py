"""The comparison page's figures, from a stored evaluation: no worker, no model."""

from __future__ import annotations

from types import SimpleNamespace

from jobs.comparison import comparison, evaluates, evaluation_of

BASE = {
    "name": "smol", "adapter": None, "perplexity": 7.0, "accuracy": 0.65, "exact_match": 0.5,
    "bits_per_weight": 16.0, "tokens_per_second": 100.0, "peak_memory_bytes": 600 << 20,
}  # fmt: skip
FOUR_BIT = {
    **BASE, "name": "smol-q4", "perplexity": 7.7, "accuracy": 0.6, "exact_match": 0.5,
    "bits_per_weight": 4.5, "tokens_per_second": 120.0, "peak_memory_bytes": 300 << 20,
}  # fmt: skip
EVALUATION = {"variants": [BASE, FOUR_BIT], "dataset": {"label": "builtin", "examples": 8}}


def cells_by_metric(result, row: int) -> dict:
    cells = result.rows[row]["cells"]
    return {metric.key: cell for metric, cell in zip(result.metrics, cells, strict=True)}


def test_the_base_is_first_and_has_no_difference():
    result = comparison(EVALUATION)
    assert [row["base"] for row in result.rows] == [True, False]
    base = cells_by_metric(result, 0)
    assert base["perplexity"].text == "7.000" and base["perplexity"].difference == ""
    assert all(cell.verdict == "" for cell in base.values())


def test_each_variant_differs_from_the_base_and_says_which_way_is_better():
    cells = cells_by_metric(comparison(EVALUATION), 1)
    assert cells["perplexity"].difference == "+0.700 (+10.0%)"
    assert cells["perplexity"].verdict == "worse"  # lower perplexity is better
    assert cells["accuracy"].text == "60.0%" and cells["accuracy"].difference == "-5.0 pts"
    assert cells["accuracy"].verdict == "worse"
    assert cells["exact_match"].verdict == "same"
    assert cells["bits_per_weight"].verdict == "better"
    assert cells["tokens_per_second"].difference == "+20 (+20.0%)"
    assert cells["tokens_per_second"].verdict == "better"
    assert cells["peak_memory_bytes"].difference == "-300 MiB (-50.0%)"


def test_bars_are_scaled_to_the_widest_of_their_metric():
    plots = {plot["key"]: plot for plot in comparison(EVALUATION).plots}
    base, quantized = plots["bits_per_weight"]["bars"]
    assert base.percent == 100.0 and quantized.percent == 28.1
    assert base.base and not quantized.base
    assert quantized.width < base.width and quantized.y > base.y


def test_missing_figures_are_dashes_and_metrics_nobody_has_are_left_out():
    old = {k: v for k, v in BASE.items() if k != "bits_per_weight"}  # before bits per weight
    text_only = {**old, "name": "other", "accuracy": None, "exact_match": None}
    result = comparison({"variants": [old, text_only]})
    assert "bits_per_weight" not in [metric.key for metric in result.metrics]
    cells = cells_by_metric(result, 1)
    assert cells["accuracy"].text == "—" and cells["accuracy"].verdict == ""


def test_which_jobs_carry_an_evaluation():
    def job(kind, status="succeeded", result=None, params=None):
        return SimpleNamespace(kind=kind, status=status, result=result or {}, params=params or {})

    assert evaluation_of(job("evaluate", result=EVALUATION))["variants"] == [BASE, FOUR_BIT]
    assert evaluation_of(job("evaluate", status="running", result=EVALUATION)) is None
    quantized = job("quantize", result={"bits": 4, "evaluation": EVALUATION})
    assert evaluation_of(quantized)["variants"][1]["name"] == "smol-q4"
    assert evaluation_of(job("quantize", result={"bits": 4})) is None
    assert evaluation_of(job("evaluate", result={"variants": "nope"})) is None
    assert evaluates(job("quantize", params={"evaluate": True}))
    assert not evaluates(job("quantize")) and not evaluates(job("dataset"))


def test_the_perplexity_change_of_a_quantize_jobs_evaluation():
    from jobs.quantize_evaluation import perplexity_change

    change = perplexity_change(EVALUATION)
    assert change == {"source": 7.0, "result": 7.7, "change": 0.7, "change_percent": 10.0}
    assert perplexity_change({"variants": [{**BASE, "perplexity": None}, FOUR_BIT]}) is None


def test_a_stage_reports_its_share_of_the_job(tmp_path):
    from jobs.context import StageContext
    from tests.jobs.recording_context import RecordingContext

    ctx = RecordingContext(params={}, workdir=tmp_path)
    stage = StageContext(ctx, 0.6, 0.35)
    stage.progress(0.0, "reading")
    stage.progress(1.0, "scored")
    stage.log("a line")
    assert ctx.progress_reports == [(0.6, "reading"), (0.95, "scored")]
    assert ctx.lines == ["a line"] and stage.workdir == tmp_path
