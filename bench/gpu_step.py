"""Where one decode step's time goes on the GPU, and what a compiled whole step changes.

    python3 bench/gpu_step.py --out DIR                       # on the H200 (a few minutes)
    python3 bench/gpu_step.py --out DIR --shape tiny-bf16 --tokens 16 --envs default

A parent process builds the random-weight model once, then runs child processes that
alternate between MLX environment settings (MLX_MAX_OPS_PER_BUFFER: how many operations
MLX's CUDA backend records into one CUDA graph before it launches it; MLX_USE_CUDA_GRAPHS=0:
launch each kernel at once, no graph; each is read once per process, so it cannot
alternate inside one). Each child alternates, in itself, these
decode loops on one row and on a batch, greedy, from the same prompt:

- `eager_sync`: mlx-lm's model and KVCache, `mx.eval` after each step; the host time to
  build the step's graph and the time waiting in `mx.eval` are timed apart;
- `eager_async`: the same, pipelined as mlx-lm's generate_step (the next step is queued
  with `mx.async_eval` before the previous token is read back);
- `fused_async`: eager_async with each layer's q/k/v and gate/up projections as one
  matmul each (inference/engine/acceleration/fused_projections.py; measured first with a copy of
  it in bench/, commit c6eeeab): fewer kernels a step;
- `kernels_async`: fused_async with decode_kernels.py's RoPE kernel on its one-token
  steps (RoPE'd q/k/v from the fused matmul's output); `kernelsall_async`: with its
  residual-add-and-norm kernel too;
- `fused_batchcache`, `kernels_batchcache`: the two above over the engine's batch rows (an
  offset per row, and their mask rule: inference/engine/kv/rows.py);
- `static_async`: a pre-allocated KV cache of fixed capacity, written at an index held
  in an array, attention masked over the capacity: every step has the same shapes;
- `compiled_async`: that step as one `mx.compile`d function (model, cache update, mask,
  argmax), traced once per batch size, pipelined as above.

It also counts the step graph's primitives (`mx.export_to_dot`), and with --profile the
kernels a step launches and their summed device time (PyTorch's profiler: CUPTI sees MLX's
kernels in the same process). Writes DIR/gpu_step.json; prints a table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from bench.gpu_models import SHAPES, build_folder, weight_bytes  # noqa: E402

TOKENIZER = ROOT / "var" / "models" / "smollm2-135m-instruct"
PROMPT = 32
KERNELS_SET = os.environ.get("MLXLAB_DECODE_KERNELS")  # as the process started
LOOPS = (
    "eager_sync",
    "eager_async",
    "fused_async",
    "kernels_async",
    "kernelsall_async",
    "fused_batchcache",
    "kernels_batchcache",
    "static_async",
    "compiled_async",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", default="llama-1b-bf16")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument(
        "--envs",
        default="default,60,200",
        help="settings to alternate: a number is MLX_MAX_OPS_PER_BUFFER, or NAME=VALUE",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each loop")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--loops", default=",".join(LOOPS), help="eager_sync first: the reference")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mlxlab-step-"))
    folder = build_folder(SHAPES[args.shape], work / args.shape, TOKENIZER)
    report = {"shape": args.shape, "weight_bytes": weight_bytes(folder), "runs": []}
    os.environ.setdefault("MLX_PTX_CACHE_DIR", str(work / "kernels"))
    envs = args.envs.split(",")
    # The profiled run last and apart: PyTorch's CUDA beside MLX's could break a child.
    runs = [(r, value, False) for r in range(args.rounds) for value in envs]
    for round_, value, profiled in runs + ([(args.rounds, envs[0], True)] if args.profile else []):
        env = dict(os.environ)
        if "=" in value:
            name, _, setting = value.partition("=")
            env[name] = setting
        elif value != "default":
            env["MLX_MAX_OPS_PER_BUFFER"] = value
        command = [sys.executable, __file__, "--out", str(args.out), "--child", str(folder)]
        command += ["--tokens", str(args.tokens), "--batches", args.batches, "--loops", args.loops]
        command += ["--repeats", str(args.repeats)]
        command += ["--profile"] if profiled else []
        started = time.perf_counter()
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
        lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
        run = json.loads(lines[-1]) if lines else {"error": result.stderr[-3000:]}
        run.update(setting=value, round=round_, process_s=time.perf_counter() - started)
        report["runs"].append(run)
        (args.out / "gpu_step.json").write_text(json.dumps(report, indent=1))
        print(summary(run), flush=True)


def summary(run: dict) -> str:
    if "error" in run:
        return f"{run['setting']}: error {run['error'][-600:]}"
    parts = [f"{run['setting']} round {run['round']}:"]
    for key, value in run["rates"].items():
        parts.append(f"{key} {max(value):.0f}")
    return " ".join(parts)


# -- the child: one process, one MLX environment -------------------------------------------


def child(args) -> None:
    import mlx.core as mx
    from mlx_lm import load

    model, _ = load(str(args.child))
    vocab = model.args.vocab_size
    batches = [int(b) for b in args.batches.split(",")]
    result = {"rates": collections.defaultdict(list), "host": {}, "primitives": {}, "match": {}}
    names = args.loops.split(",")
    for batch in batches:
        prompt = mx.random.randint(3, vocab, (batch, PROMPT), key=mx.random.key(batch))
        loops = {name: make_loop(name, model, prompt, args.tokens) for name in names}
        reference = None
        for attempt in range(args.repeats + 1):  # the first compiles and is not counted
            for name, loop in loops.items():
                tokens, rate, host = loop()
                if attempt == 1 and name == names[0]:  # is the reference itself repeatable?
                    result["match"][f"repeat_b{batch}"] = first_difference(reference, tokens)
                if attempt == 0:
                    reference = reference if reference is not None else tokens
                    result["match"][f"{name}_b{batch}"] = first_difference(reference, tokens)
                    continue
                result["rates"][f"{name}_b{batch}"].append(round(rate * batch, 1))
                if host:
                    result["host"][f"{name}_b{batch}"] = host
        result["primitives"][f"eager_b{batch}"] = count_primitives(model, prompt)
        if args.profile:
            try:
                result.setdefault("profile", {}).update(profile(loops, batch, args.tokens))
            except Exception as exc:  # the rates above still count
                result["profile_error"] = repr(exc)
    print(json.dumps(result), flush=True)


def first_difference(reference: list, tokens: list) -> int | None:
    """The first step where greedy tokens differ from eager_sync's; None if none does."""
    for index, (a, b) in enumerate(zip(reference, tokens, strict=False)):
        if a != b:
            return index
    return None


def make_loop(name: str, model, prompt, tokens: int):
    if name == "eager_sync":
        return lambda: eager_sync(model, prompt, tokens)
    if name == "eager_async":
        return lambda: pipelined(*eager_stepper(model, prompt), tokens)
    if name.startswith(("fused_", "kernels")):
        kernels = {"fused": "0", "kernels": "qkv", "kernelsall": "all"}[name.split("_")[0]]
        batch_cache = name.endswith("batchcache")
        return lambda: fused_run(model, prompt, tokens, kernels, batch_cache)
    compiled = name == "compiled_async"
    state = {}

    def run():
        return pipelined(*static_stepper(model, prompt, tokens, compiled, state), tokens)

    return run


def fused_run(model, prompt, tokens: int, kernels: str = "0", batch_cache: bool = False):
    """eager_async with the engine's fused projections, mlx-lm's blocks again after it;
    `kernels`: decode_kernels.py's kernels on one-token steps (MLXLAB_DECODE_KERNELS: 0,
    qkv: the RoPE kernel, all: both kernels); `batch_cache`: with
    the engine's batch rows (per-row offsets and its mask rule, as the engine runs)."""
    from inference.engine.acceleration import decode_kernels
    from inference.engine.acceleration.fused_projections import fuse_projections, plain_blocks

    reference = KERNELS_SET == "reference" and kernels != "0"  # a CPU smoke run
    os.environ[decode_kernels.VARIABLE] = "reference" if reference else kernels
    fuse_projections(model)  # each projection's weight becomes a view: equal values
    try:
        return pipelined(*eager_stepper(model, prompt, batch_cache), tokens)
    finally:
        plain_blocks(model)


def eager_prefill(model, prompt, batch_cache: bool = False):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from inference.engine.kv.rows import RowsKVCache

    if batch_cache:
        cache = [RowsKVCache([0] * prompt.shape[0]) for _ in model.layers]
    else:
        cache = make_prompt_cache(model)
    token = mx.argmax(model(prompt, cache=cache)[:, -1, :], axis=-1)
    mx.eval(token)
    return cache, token


def eager_sync(model, prompt, tokens: int):
    """(tokens per step, steps/s, host timings): build, then wait, each step apart."""
    import mlx.core as mx

    cache, token = eager_prefill(model, prompt)
    out, build, wait = [], [], []
    started = time.perf_counter()
    for _ in range(tokens):
        t0 = time.perf_counter()
        token = mx.argmax(model(token[:, None], cache=cache)[:, -1, :], axis=-1)
        t1 = time.perf_counter()
        mx.eval(token)
        t2 = time.perf_counter()
        out.append(token.tolist())
        build.append(t1 - t0)
        wait.append(t2 - t1)
    rate = tokens / (time.perf_counter() - started)
    host = {"build_ms": _ms(build), "eval_ms": _ms(wait)}
    return out, rate, host


def _ms(values: list[float]) -> float:
    return round(1000 * statistics.median(values), 3)


def eager_stepper(model, prompt, batch_cache: bool = False):
    import mlx.core as mx

    cache, token = eager_prefill(model, prompt, batch_cache)

    def step(token):
        return mx.argmax(model(token[:, None], cache=cache)[:, -1, :], axis=-1)

    return step, token


def pipelined(step, token, tokens: int):
    """generate_step's order: queue step n+1, then read step n's tokens back."""
    import mlx.core as mx

    out, build = [], []
    started = time.perf_counter()
    for _ in range(tokens):
        t0 = time.perf_counter()
        following = step(token)
        mx.async_eval(following)
        build.append(time.perf_counter() - t0)
        out.append(token.tolist())
        token = following
    mx.eval(token)
    rate = tokens / (time.perf_counter() - started)
    return out, rate, {"build_and_queue_ms": _ms(build)}


def static_stepper(model, prompt, tokens: int, compiled: bool, state: dict):
    """A fixed-capacity cache filled by an eager prefill, and its one-token step."""
    import mlx.core as mx

    from bench.static_cache import StaticCache, decode_step, prefill_into

    capacity = (PROMPT + tokens + 255) // 256 * 256
    caches = StaticCache.for_model(model, prompt.shape[0], capacity)
    token = prefill_into(model, prompt, caches)
    if compiled and "step" not in state:  # one trace per batch size, kept across runs
        state["step"] = mx.compile(decode_step(model), inputs=[model])
    function = state["step"] if compiled else decode_step(model)
    keys = [c.keys for c in caches]
    values = [c.values for c in caches]
    index = mx.array(PROMPT, dtype=mx.int32)
    carried = {"kv": (keys, values), "index": index}

    def step(token):
        following, index, keys, values = function(token, carried["index"], *carried["kv"])
        carried["kv"], carried["index"] = (keys, values), index
        return following

    return step, token


def count_primitives(model, prompt) -> dict:
    """Primitives in one eager decode step's graph, by name (views included)."""
    import mlx.core as mx

    cache, token = eager_prefill(model, prompt)
    output = mx.argmax(model(token[:, None], cache=cache)[:, -1, :], axis=-1)
    path = Path(tempfile.mkdtemp()) / "step.dot"
    mx.export_to_dot(str(path), output)
    labels = collections.Counter()
    for line in path.read_text().splitlines():
        if "shape=rectangle" in line:
            labels[line.split('label ="')[1].split('"')[0]] += 1
    return {"total": sum(labels.values()), **dict(labels.most_common())}


def profile(loops: dict, batch: int, tokens: int) -> dict:
    """Per decode step: kernels launched, their summed device time, graph launches."""
    try:
        import torch
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
    except ImportError:
        return {}
    rows = {}
    for name, loop in loops.items():
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            loop()
            torch.cuda.synchronize()
        kernels, device_us, launches = 0, 0.0, collections.Counter()
        by_kernel = collections.Counter()
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernels += 1
                device_us += event.device_time
                by_kernel[event.name[:90]] += event.device_time
            elif event.name.startswith(("cuda", "cu")):
                launches[event.name] += 1
        steps = tokens + 1  # the prefill counts as one
        rows[f"{name}_b{batch}"] = {
            "kernels_per_step": round(kernels / steps, 1),
            "kernel_ms_per_step": round(device_us / 1000 / steps, 3),
            "api_calls_per_step": {k: round(v / steps, 1) for k, v in launches.most_common(8)},
            "kernel_us_per_step": {k: round(v / steps, 1) for k, v in by_kernel.most_common(12)},
        }
    return rows


if __name__ == "__main__":
    main()
