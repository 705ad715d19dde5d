"""Where a CUDA decode step's host time goes, part by part, in each of the native step's
replay modes: a graph kept a batch and replayed as it is, a graph captured every step, and
kernels launched one by one.

    MLXLAB_CUDA_DECODE_LIBRARY=... python3 bench/gpu_host_parts.py smollm2-135m-4bit,llama-1b-4bit

For each shape (bench/gpu_models.py, random weights) on the native step: a pipelined
greedy loop as mlx-lm's generate_step runs it (step n+1 queued before step n's token is
read; 300 steps from a 32-token prompt, so the KV cache grows once), timing the model call
(Python glue and the step's node), the argmax, `async_eval` (MLX's eval: the step's
launches) and the wait, twice each mode; whether every mode chose the tokens the launched
kernels chose; the plan's check over the model's tree; the model call's Python glue with a
no-op native step; and the native step alone. On a CPU, MLXLAB_CUDA_DECODE=reference runs
the glue over the reference step (the modes are then all one)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

import mlx.core as mx  # noqa: E402
from mlx_lm.models import llama  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from bench.gpu_models import SHAPES, fused_model  # noqa: E402
from inference.engine.acceleration import cuda_decode  # noqa: E402

PROMPT = list(range(3, 35))


def median_us(seconds: list[float]) -> float:
    return round(1e6 * statistics.median(seconds), 1)


MODES = ("kept", "captured", "launched")  # the native Model.replay's


def replay(native, mode: str) -> None:
    if hasattr(native, "replay"):  # the reference step (MLXLAB_CUDA_DECODE=reference) has none
        native.replay(mode)


def pipelined(model, steps: int = 300, skip: int = 50) -> tuple[dict, int, list[int]]:
    """({part: median us a step}, tok/s, the greedy tokens) of one loop."""
    cache = make_prompt_cache(model)
    llama.Model.__call__(model, mx.array([PROMPT]), cache=cache)
    y = mx.array([[7]])
    parts: dict[str, list[float]] = {"call": [], "argmax": [], "async_eval": [], "wait": []}
    tokens, started = [], 0.0
    for i in range(steps):
        if i == skip:
            started = time.perf_counter()
        t0 = time.perf_counter()
        logits = model(y, cache=cache)
        t1 = time.perf_counter()
        following = mx.argmax(logits[:, -1], axis=-1)[:, None]
        t2 = time.perf_counter()
        mx.async_eval(following)
        t3 = time.perf_counter()
        tokens.append(y.item())
        t4 = time.perf_counter()
        y = following
        if i >= skip:
            for part, spent in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                parts[part].append(spent)
    rate = round((steps - skip) / (time.perf_counter() - started))
    return {part: median_us(spent) for part, spent in parts.items()}, rate, tokens


def step_alone(model, native) -> dict:
    """Median us to build the native step's node, queue it, and wait for it."""
    cache = make_prompt_cache(model)
    llama.Model.__call__(model, mx.array([PROMPT]), cache=cache)
    for c in cache:
        cuda_decode._reserve(c, c.offset)
    arrays = [a for c in cache for a in (c.keys, c.values)]
    token, position, first = (mx.array([v], mx.int32) for v in (7, len(PROMPT), 0))
    mx.eval(token, position, first, arrays)
    build, queue, wait = [], [], []
    for i in range(200):
        t0 = time.perf_counter()
        out = native.step(token, position, first, len(PROMPT), arrays, False)
        t1 = time.perf_counter()
        mx.async_eval(out[0])
        t2 = time.perf_counter()
        mx.eval(out[0])
        t3 = time.perf_counter()
        arrays = out[1:]
        if i >= 20:
            build.append(t1 - t0)
            queue.append(t2 - t1)
            wait.append(t3 - t2)
    return {"build": median_us(build), "async_eval": median_us(queue), "wait": median_us(wait)}


class _Returning:
    """A native model whose step costs nothing: it hands back the caches as they came."""

    def __init__(self, native, logits: mx.array) -> None:
        self._native, self._logits = native, logits

    def step(self, tokens, positions, first_columns, column, caches, copy_caches):
        return [self._logits, *caches]

    def __getattr__(self, name):
        return getattr(self._native, name)


def glue_alone(model, steps: int = 2000) -> float:
    """Median us of the model call's Python glue (cuda_decode.py), the native step a no-op."""
    plan = model._mlxlab_plan
    native, plan.native = plan.native, _Returning(plan.native, mx.zeros((1, 1, 8)))
    try:
        cache = make_prompt_cache(model)
        llama.Model.__call__(model, mx.array([PROMPT]), cache=cache)
        y, spent = mx.array([[7]]), []
        for _ in range(steps):
            started = time.perf_counter()
            model(y, cache=cache)
            spent.append(time.perf_counter() - started)
        return median_us(spent[steps // 10 :])
    finally:
        plan.native = native


def probe(name: str) -> None:
    model = fused_model(SHAPES[name])
    if not cuda_decode.install(model):
        print(name, "does not take the CUDA decode step")
        return
    native = model._mlxlab_plan.native
    chosen = {}
    for mode in MODES + MODES:
        replay(native, mode)
        parts, rate, tokens = pipelined(model)
        ran = native.replays() if hasattr(native, "replays") else mode  # launched after a fall-back
        print(f"{name} {mode} (ran {ran}): {rate} tok/s; us a step {parts}")
        chosen.setdefault(mode, tokens)
    for mode in MODES[:-1]:
        same = sum(a == b for a, b in zip(chosen[mode], chosen["launched"], strict=True))
        print(f"{name} greedy tokens, {mode} against launched: {same}/{len(chosen[mode])} equal")
    tree, spent = model._mlxlab_plan.tree, []
    for _ in range(100):
        started = time.perf_counter()
        unchanged = tree.unchanged()
        spent.append(time.perf_counter() - started)
    print(f"{name} the plan's check: unchanged {unchanged}, {median_us(spent)} us")
    print(f"{name} the model call's glue alone (a no-op native step): {glue_alone(model)} us")
    for mode in MODES:
        replay(native, mode)
        print(f"{name} {mode}, the native step alone, us: {step_alone(model, native)}")
    replay(native, cuda_decode.DEFAULT_REPLAY)


if __name__ == "__main__":
    for shape_name in sys.argv[1].split(","):
        probe(shape_name)
