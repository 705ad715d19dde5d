"""What a verifying pass costs against a plain decode step, by its width (`make bench`).

    .venv/bin/python bench/verify_cost.py [--rounds 3]

Speculative decoding pays off by as much as a pass over 1 + k positions costs
less than k + 1 steps. On this CPU's kernel path that cost is the matmuls' arithmetic,
which grows with the rows of a pass (the 4-bit weights are read once either way), so
this is where a rewrite's or a copy's speedup goes. Measured in-process on the default
model, as the engine verifies (exact attention, query by query), after a 300-token
prompt: best of several passes at each width, the cache trimmed back after each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from inference.engine import load_model  # noqa: E402

MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
WIDTHS = (1, 2, 4, 6, 8, 10, 13)
PROMPT = 300


def pass_seconds(model, exact: bool, width: int, tries: int = 6) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from inference.engine.acceleration.exact_attention import exact_attention

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([list(range(1000, 1000 + PROMPT))]), cache=cache))
    tokens = mx.array([list(range(2000, 2000 + width))])
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        with exact_attention(exact and width > 1):
            mx.eval(model(tokens, cache=cache))
        best = min(best, time.perf_counter() - started)
        for layer in cache:
            layer.trim(width)
    return best


def main() -> None:
    from inference.engine.loop.speculative import speculation_for

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    loaded = load_model(MODEL)
    exact = speculation_for(loaded, max_rows=16, exact=True).exact
    best: dict[int, float] = {}
    for _ in range(args.rounds):  # rounds over every width: load spreads over all of them
        for width in WIDTHS:
            best[width] = min(
                best.get(width, float("inf")), pass_seconds(loaded.model, exact, width)
            )
    step = best[1]
    print(f"{MODEL.name}, {loaded.fast_path.path} path, exact verification: {exact}")
    for width, seconds in best.items():
        extra = (seconds / step - 1) / (width - 1) if width > 1 else 0.0
        print(
            f"  {width:2d} positions: {seconds * 1000:6.1f} ms = {seconds / step:4.2f} steps"
            f" ({extra:.2f} of a step a position past the first)"
        )


if __name__ == "__main__":
    main()
