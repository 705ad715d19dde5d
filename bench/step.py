"""One engine step without a server: prefill tokens/s, decode step time and RSS, per weight path.

    .venv/bin/python bench/step.py            # MLX's quantized, dense float32, our kernel
    .venv/bin/python bench/step.py --steps 30 --paths kernel,dense
    .venv/bin/python bench/step.py --paths kernel,unfused   # fused decode layers or not

Each path runs in a child process of its own, so that its resident memory is its own;
they alternate `--rounds` times, as the CPU may be shared (the best round counts).

The model's forward pass plus an argmax, `mx.eval` per step, as in the decode loop; the
figures behind docs/BENCHMARKS.md's "CPU: the engine's step and batching".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from inference.engine import load_model  # noqa: E402
from inference.engine.acceleration.dense_weights import FastPathOptions  # noqa: E402

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


PATHS = {
    "mlx": FastPathOptions(enabled=False),
    "dense": FastPathOptions(weights="dense"),
    "kernel": FastPathOptions(weights="kernel"),
    "unfused": FastPathOptions(weights="kernel"),  # the kernel, MLXLAB_FUSED_DECODE=0
}


def resident_mb() -> float:
    """This process's resident set now (VmRSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(path: str, prompt: int, steps: int) -> str:
    loaded = load_model(MODEL, fast_path=PATHS[path])
    model, report = loaded.model, loaded.fast_path
    prefill_rate(model, 16)  # warm-up
    line = [f"{path:6s} ({report.path:9s}) prefill {prefill_rate(model, prompt):6.1f} tok/s"]
    for batch in (1, 8):
        step = decode_step(model, batch, steps if batch == 1 else max(steps // 3, 3))
        line.append(f"batch {batch}: {step * 1000:6.1f} ms ({batch / step:5.1f} tok/s)")
    line.append(f"RSS {resident_mb():5.0f} MB")
    return " | ".join(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--prompt", type=int, default=128, help="prefill length")
    parser.add_argument("--paths", default="mlx,dense,kernel", help="of " + ",".join(PATHS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(measure(args.one, args.prompt, args.steps), flush=True)
        return
    for _ in range(args.rounds):
        for path in args.paths.split(","):
            command = [sys.executable, __file__, "--one", path, "--steps", str(args.steps)]
            env = dict(os.environ, MLXLAB_FUSED_DECODE="0" if path == "unfused" else "1")
            subprocess.run([*command, "--prompt", str(args.prompt)], check=True, env=env)


if __name__ == "__main__":
    main()
