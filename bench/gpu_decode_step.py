"""Check and time the CUDA decode step on a GPU: `inference/engine/acceleration/cuda_decode.py`.

    python3 bench/gpu_decode_step.py [--shape llama-1b-bf16] [--tokens 128] [--runs 3]
        [--variants 3:16,99:0]

On a random-weight Llama model: each step's logits and the caches it writes against
mlx-lm's model (the fused layers as the engine runs them), one row (`KVCache`, across a
256-column growth) and a left-padded batch (`BatchKVCache`), with the reference's greedy
token fed to both; then greedy decode tok/s, both loops alternated in one process, one
row and batches, against the one-stream bandwidth limit. Each variant `rows:overlap_rows`
sets the batch from which the matvecs run on tensor cores and the one below which kernels
overlap, and optionally the one from which the matmuls run through cuBLAS (`Model.tune`;
`3:16:99` keeps every batch on the step's own kernels), and is checked and timed in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

import mlx.core as mx  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from mlx_lm.models import llama  # noqa: E402
from mlx_lm.models.cache import BatchKVCache, KVCache  # noqa: E402

from bench.gpu_models import SHAPES, fused_model  # noqa: E402
from inference.engine.acceleration import cuda_decode  # noqa: E402


def reference(model, inputs, cache):
    return llama.Model.__call__(model, inputs, cache=cache)


def prefill(model, prompts: list[list[int]], batch_cache: bool):
    layers = len(model.model.layers)
    if not batch_cache:
        cache = [KVCache() for _ in range(layers)]
        reference(model, mx.array(prompts), cache)
    else:
        longest = max(len(p) for p in prompts)
        padding = [longest - len(p) for p in prompts]
        cache = [BatchKVCache(padding) for _ in range(layers)]
        reference(
            model, mx.array([[0] * pad + p for pad, p in zip(padding, prompts, strict=True)]), cache
        )
    mx.eval([c.state for c in cache])
    return cache


def compare(model, prompts: list[list[int]], batch_cache: bool, steps: int) -> dict:
    """Teacher-forced: both paths get the reference's greedy token each step."""
    ours, theirs = prefill(model, prompts, batch_cache), prefill(model, prompts, batch_cache)
    token = mx.array([[p[-1]] for p in prompts])
    worst, agree, total = 0.0, 0, 0
    for _ in range(steps):
        want = reference(model, token, theirs).astype(mx.float32)
        got = model(token, cache=ours).astype(mx.float32)
        scale = mx.abs(want).max().item()
        worst = max(worst, mx.abs(want - got).max().item() / max(scale, 1e-6))
        best = mx.argmax(want[:, -1], axis=-1)
        agree += int((best == mx.argmax(got[:, -1], axis=-1)).sum().item())
        total += len(prompts)
        token = best[:, None].astype(mx.int32)
    cache_error = 0.0
    for a, b in zip(ours, theirs, strict=True):
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            n = min(x.shape[2], y.shape[2])
            d = mx.abs(x[..., :n, :].astype(mx.float32) - y[..., :n, :].astype(mx.float32)).max()
            cache_error = max(cache_error, d.item())
    offsets_equal = all(
        (mx.all(a.offset == b.offset).item() if batch_cache else a.offset == b.offset)
        for a, b in zip(ours, theirs, strict=True)
    )
    return {"worst_relative_logit_error": worst, "argmax_agree": f"{agree}/{total}",
            "cache_max_abs_error": cache_error, "offsets_equal": offsets_equal}  # fmt: skip


def decode_rate(call, model, batch: int, tokens: int, vocab: int, seed: int) -> float:
    """Greedy tok/s of `call`, pipelined as mlx-lm's generate_step: step n+1 queued
    before step n's tokens are read."""
    import random

    draw = random.Random(seed)
    prompts = [[draw.randrange(3, vocab) for _ in range(32)] for _ in range(batch)]
    cache = prefill(model, prompts, batch_cache=batch > 1)
    y = mx.array([[p[-1]] for p in prompts])
    logits = call(model, y, cache)
    y = mx.argmax(logits[:, -1], axis=-1)[:, None]
    mx.async_eval(y)
    mx.eval(y)
    host = []
    start = time.perf_counter()
    for _ in range(tokens):
        queued = time.perf_counter()
        logits = call(model, y, cache)
        following = mx.argmax(logits[:, -1], axis=-1)[:, None]
        mx.async_eval(following)
        host.append(time.perf_counter() - queued)
        y.tolist()
        y = following
    y.tolist()
    HOST_MS.append(1000 * statistics.median(host))
    return batch * tokens / (time.perf_counter() - start)


HOST_MS: list[float] = []  # the median time to build and queue a step, per decode_rate call


def profile_step(model, batch: int, vocab: int, steps: int = 16) -> dict:
    """Device time a step by kernel (PyTorch's profiler: CUPTI sees MLX's kernels)."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    cache = prefill(model, [[3 + i] * 32 for i in range(batch)], batch_cache=batch > 1)
    y = mx.array([[5]] * batch)
    mx.eval(ours(model, y, cache))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            y = mx.argmax(ours(model, y, cache)[:, -1], axis=-1)[:, None]
            mx.async_eval(y)
        mx.eval(y)
        torch.cuda.synchronize()
    by_kernel = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            found = re.search(r"(tensor_matvec|matvec|attend|embed)<[^>]*>", event.name)
            name = found.group(0) if found else event.name.split("(")[0]
            by_kernel[name[:70]] += event.device_time / steps
    return {"device_us_per_step": round(sum(by_kernel.values()), 1),
            **{k: round(v, 1) for k, v in by_kernel.most_common(10)}}  # fmt: skip


def ours(model, inputs, cache):
    return model(inputs, cache=cache)


def bandwidth() -> float:
    """Device copy bandwidth in bytes/s (read and write counted), as bench/gpu.py takes it."""
    a = mx.random.uniform(shape=(256 * 1024 * 1024,))  # 1 GiB of float32
    mx.eval(a)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        b = a * 1.0
        mx.eval(b)
        best = max(best, 2 * a.nbytes / (time.perf_counter() - start))
        del b
    return best


def checks(model, native) -> dict:
    copies = native.cache_copies()
    rows = {
        "one_row_kvcache": compare(model, [[5, 9, 13] * 12 + [7]], False, 24),
        "one_row_growth": compare(model, [list(range(3, 253))], False, 12),
        "batch_left_padded": compare(model, [[4] * 5, list(range(3, 20)), [8] * 30], True, 24),
        "batch_of_19": compare(model, [[3 + i] * (8 + i) for i in range(19)], True, 8),
        "batch_of_32": compare(model, [[3 + i] * (4 + i) for i in range(32)], True, 8),
    }
    rows["cache_copies_in_checks"] = native.cache_copies() - copies
    return rows


def timed(model, batch: int, vocab: int, args, with_mlx: bool) -> dict:
    """{loop: ([tok/s a run], [host ms a step a run])}, the loops alternated."""
    loops = (("mlx", reference), ("cuda_step", ours)) if with_mlx else (("cuda_step", ours),)
    out = {name: ([], []) for name, _ in loops}
    for run in range(args.runs + 1):
        for name, call in loops:
            rate = decode_rate(call, model, batch, args.tokens, vocab, run)
            if run:  # the first run compiles
                out[name][0].append(rate)
                out[name][1].append(HOST_MS[-1])
    return out


def tune(model, variant: str) -> tuple[int, int, int]:
    """Set the step's `tensor_rows:overlap_rows[:gemm_rows]` (Model.tune; a gemm_rows of 0 or
    none leaves the model's own); returns the three."""
    values = [int(v) for v in variant.split(":")]
    tensor_rows, overlap_rows, gemm_rows = values + [0] * (3 - len(values))
    model._plan().native.tune(tensor_rows, overlap_rows, gemm_rows)
    return tensor_rows, overlap_rows, gemm_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="llama-1b-bf16", choices=sorted(SHAPES))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument(
        "--variants", default="3:16", help="tensor_rows:overlap_rows[:gemm_rows], comma-separated"
    )
    parser.add_argument("--out", default="")
    parser.add_argument("--profile", action="store_true", help="only the kernels' device time")
    args = parser.parse_args()
    # Every batch the kernels take, not only those the engine sends them.
    os.environ.setdefault(cuda_decode.MAX_BATCH_VARIABLE, "32")
    shape = SHAPES[args.shape]
    model = fused_model(shape)
    if not cuda_decode.install(model):
        print("the CUDA decode step did not install")
        return 1
    native = model._mlxlab_native
    if args.profile:
        for variant in args.variants.split(","):
            tune(model, variant)
            for batch in [int(b) for b in args.batches.split(",")]:
                found = profile_step(model, batch, shape.vocab)
                print(variant, batch, json.dumps(found, indent=1), flush=True)
        return 0
    weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    rows: dict = {"shape": shape.name, "weight_bytes": weight_bytes}
    rows["copy_bandwidth"] = bw = bandwidth()
    limit = bw / weight_bytes
    rows["one_stream_limit_tps"] = limit
    batches = [int(b) for b in args.batches.split(",")]
    mlx_rates: dict[int, float] = {}
    for variant in args.variants.split(","):
        tensor_rows, overlap_rows, gemm_rows = tune(model, variant)
        print(f"variant {variant}: tensor cores from {tensor_rows} rows, "
              f"overlapping kernels below {overlap_rows}, cuBLAS from {gemm_rows or 'default'}")  # fmt: skip
        rows[variant] = checks(model, native)
        print(json.dumps(rows[variant], indent=1), flush=True)
        copies = native.cache_copies()
        for batch in batches:
            rates = timed(model, batch, shape.vocab, args, with_mlx=batch not in mlx_rates)
            if "mlx" in rates:
                mlx_rates[batch] = statistics.median(rates["mlx"][0])
            mine, theirs = statistics.median(rates["cuda_step"][0]), mlx_rates[batch]
            rows[variant][f"b{batch}"] = rates
            share = f", {mine / limit:.0%} of the limit" if batch == 1 else ""
            print(f"  batch {batch}: cuda step {mine:,.0f} tok/s against mlx {theirs:,.0f} "
                  f"({mine / theirs:.2f}x){share}; host ms a step "
                  f"{statistics.median(rates['cuda_step'][1]):.2f}", flush=True)  # fmt: skip
        rows[variant]["cache_copies_in_timing"] = native.cache_copies() - copies
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s, one-stream limit {limit:,.0f} tok/s")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
