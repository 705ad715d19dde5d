"""bench/gpu_targets.py: the GPU speed targets judged from a GPU bench report (no GPU needed)."""

from __future__ import annotations

from bench.gpu_targets import judge

# Lease C's rows ("Tensor cores and overlapping kernels" in docs/BENCHMARKS.md's history:
# git show 02df74b:docs/BENCHMARKS.md), abridged.
ROWS = {
    "mlx_lm_generate_step_tps": 348.6,
    "mlx_lm_batch1_tps": 245.3,
    "mlx_lm_batch8_tps": 1410.5,
    "mlx_lm_batch32_tps": 5168.3,
    "mlx_lm_batch32_mixed_tps": 3974.4,
    "mlx_lm_ttft_512_s": 0.015,
    "engine_stream_tps": 940.6,
    "engine_batch1_tps": 880.1,
    "engine_batch8_tps": 4326.8,
    "engine_batch32_tps": 7235.9,
    "engine_batch32_mixed_tps": 8043.3,
    "engine_ttft_512_s": 0.014,
    "torch_stream_tps": 410.4,
}
RESTART = {"warm_up_after_restart": {"first_request_ttft_s": 0.072}}


def _report(rows: dict, limit: float = 1236.0, restart: dict = RESTART) -> dict:
    entry = {"one_stream_limit_tps": limit, "rows": rows}
    return {"models": {"llama-1b-bf16": entry}, "restart": restart}


def _by_target(report: dict) -> dict:
    return {verdict.target: verdict for verdict in judge(report)}


def test_each_target_is_judged_from_the_rows():
    verdicts = _by_target(_report(ROWS))
    assert {name: v.met for name, v in verdicts.items()} == {
        "one stream at 60% of the bandwidth limit": True,
        "batch 32 at 8,000 tok/s": False,
        "at least mlx-lm on every row": True,
        "one stream ahead of transformers": True,
        "first token after a restart under 2 s": True,
    }
    missed = verdicts["batch 32 at 8,000 tok/s"]
    assert missed.figures == "7,236 tok/s" and "9,400 tok/s" in missed.why
    assert verdicts["one stream at 60% of the bandwidth limit"].figures == "941 tok/s, 76%"
    assert verdicts["one stream at 60% of the bandwidth limit"].why == ""


def test_a_row_behind_mlx_lm_is_named_and_a_longer_wait_counts_as_behind():
    rows = {**ROWS, "engine_batch8_tps": 1400.0, "engine_ttft_512_s": 0.0167}
    verdict = _by_target(_report(rows))["at least mlx-lm on every row"]
    assert not verdict.met
    assert verdict.figures == "batch8_tps 1,400.0 against 1,410.5; ttft_512_s 0.0167 against 0.015"


def test_the_share_and_the_restart_follow_their_thresholds():
    slow_start = {"warm_up_after_restart": {"first_request_ttft_s": 2.5}}
    verdicts = _by_target(_report(ROWS, limit=1600.0, restart=slow_start))
    assert not verdicts["one stream at 60% of the bandwidth limit"].met  # 941 of 1,600: 59%
    assert not verdicts["first token after a restart under 2 s"].met


def test_other_shapes_and_absent_rows_are_not_judged():
    report = {"models": {"llama-1b-4bit": {"one_stream_limit_tps": 1.0, "rows": ROWS}}}
    assert judge(report) == []
    assert "one stream ahead of transformers" not in _by_target(
        _report({k: v for k, v in ROWS.items() if not k.startswith("torch")})
    )


# The Llama-3.1-8B shapes on an H200, 2026-12-07 (docs/BENCHMARKS.md), abridged.
LARGE = {
    "llama-8b-bf16": (177.9, {"engine_stream_tps": 185.5, "engine_batch32_tps": 3848.8,
                              "mlx_lm_batch32_tps": 1010.3}),
    "llama-8b-4bit": (683.6, {"engine_stream_tps": 294.0, "engine_batch32_tps": 2578.8,
                              "mlx_lm_batch32_tps": 275.8}),
}  # fmt: skip


def test_the_large_shapes_are_judged_by_their_own_targets():
    report = {"models": {name: {"one_stream_limit_tps": limit, "rows": rows}
                         for name, (limit, rows) in LARGE.items()}}  # fmt: skip
    verdicts = _by_target(report)
    assert {name: v.met for name, v in verdicts.items()} == {
        "llama-8b-bf16: one stream at 60% of the bandwidth limit": True,
        "llama-8b-bf16: batch 32 at twice mlx-lm's BatchGenerator": True,
        "llama-8b-4bit: one stream at 60% of the bandwidth limit": False,
        "llama-8b-4bit: batch 32 at twice mlx-lm's BatchGenerator": True,
    }
    missed = verdicts["llama-8b-4bit: one stream at 60% of the bandwidth limit"]
    assert missed.figures == "294 tok/s, 43%" and "CUDA-core matvec" in missed.why
    batch = verdicts["llama-8b-bf16: batch 32 at twice mlx-lm's BatchGenerator"]
    assert batch.figures == "3,849 against 1,010 tok/s, 3.8x"
    rows = {**LARGE["llama-8b-bf16"][1], "engine_batch32_tps": 2000.0}  # 1.98x
    report["models"]["llama-8b-bf16"]["rows"] = rows
    assert not _by_target(report)["llama-8b-bf16: batch 32 at twice mlx-lm's BatchGenerator"].met
