"""One engine step without a server: prefill tokens/s and decode step time, per weight path.

    .venv/bin/python bench/step.py            # quantized, then the CPU fast path
    .venv/bin/python bench/step.py --steps 30

The model's forward pass plus an argmax, `mx.eval` per step, as in the decode loop; the
figures behind the findings in docs/BENCHMARKS.md ("The CPU fast path ... findings").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The engine package loads the BLAS; MLX must be imported after it (in the functions).
from inference.engine import load_model  # noqa: E402
from inference.engine.dense_weights import FastPathOptions  # noqa: E402

MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"


def prefill_rate(model, length: int) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    tokens = mx.array([list(range(100, 100 + length))])
    started = time.perf_counter()
    mx.eval(model(tokens, cache=cache))
    return length / (time.perf_counter() - started)


def decode_step(model, batch: int, steps: int) -> float:
    """Median seconds of one decode step for `batch` rows after a 40-token prompt."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([list(range(200, 240))] * batch), cache=cache))
    token = mx.array([[9]] * batch)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        token = mx.argmax(model(token, cache=cache)[:, -1:, :], axis=-1)
        mx.eval(token)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--prompt", type=int, default=128, help="prefill length")
    args = parser.parse_args()
    for enabled in (False, True):
        loaded = load_model(MODEL, fast_path=FastPathOptions(enabled=enabled))
        model, report = loaded.model, loaded.fast_path
        prefill_rate(model, 16)  # warm-up
        line = [f"{report.path:9s} prefill {prefill_rate(model, args.prompt):6.1f} tok/s"]
        for batch in (1, 8):
            step = decode_step(model, batch, args.steps)
            line.append(f"batch {batch}: {step * 1000:6.1f} ms ({batch / step:5.1f} tok/s)")
        print(" | ".join(line), flush=True)
        del loaded, model


if __name__ == "__main__":
    main()
