"""Evaluation throughput: the evaluate job's scoring against mlx-lm's perplexity loop.

    .venv/bin/python bench/eval_speed.py

Both score the same tokens (the shipped set, jobs/eval_sets/basic.jsonl, as the job
tokenizes it) with the same loaded default model. mlx-lm's `mlx_lm.perplexity` loads its
data through Hugging Face `datasets`, which needs the network, so its scoring loop
(`eval_ppl`: the tokens cut into equal rows, 8 rows a batch) runs here on our tokens.
Throughput is tokens run through the model per second, the best of three passes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

import django  # noqa: E402

django.setup()

from inference.engine import load_model  # noqa: E402
from jobs.eval_examples import read_eval_file  # noqa: E402
from jobs.evaluate_scoring import batches, score_batch, tokenize  # noqa: E402

MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
EVAL_SET = ROOT / "jobs" / "eval_sets" / "basic.jsonl"
ROW_TOKENS = 128
PASSES = 3


def ours(model, items) -> float:
    """The job's scoring: every sequence of every example, batched as the job batches."""
    tokens = sum(len(seq) - 1 for item in items for seq in item.sequences)
    groups = [[items[index] for index in group] for group in batches(items)]
    return tokens / best_seconds(lambda: [score_batch(model, group) for group in groups])


def mlx_lms(model, items) -> float:
    import mlx.core as mx
    from mlx_lm.perplexity import eval_ppl

    flat = [token for item in items for seq in item.sequences for token in seq]
    rows = len(flat) // ROW_TOKENS
    data = mx.array(flat[: rows * ROW_TOKENS]).reshape(rows, ROW_TOKENS)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # its progress
        seconds = best_seconds(lambda: eval_ppl(model, data, batch_size=8))
    return rows * (ROW_TOKENS - 1) / seconds


def best_seconds(run) -> float:
    best = float("inf")
    for _ in range(PASSES):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    loaded = load_model(MODEL)
    items = [tokenize(example, loaded.tokenizer) for example in read_eval_file(EVAL_SET)]
    print(f"{len(items)} examples, path {loaded.fast_path.path}")
    mine, theirs = ours(loaded.model, items), mlx_lms(loaded.model, items)
    print(f"  evaluate job scoring      {mine:8.0f} tok/s")
    print(f"  mlx-lm perplexity loop    {theirs:8.0f} tok/s")
    print(f"  ratio                     {mine / theirs:8.2f}x")


if __name__ == "__main__":
    main()
