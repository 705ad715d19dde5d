"""Host cost of one custom kernel (mx.fast.cuda_kernel) against MLX's own operations.

    python3 bench/gpu_kernel_cost.py      # on a CUDA GPU

For decode_kernels.py's two kernels and the MLX operations they replace: microseconds a
call to build the graph (Python and MLX's graph construction) and to evaluate it (MLX
records the kernels into a CUDA graph, launches it and waits), 64 calls a graph, median of
30 graphs, one row and 32 rows (Llama-1B shape, bf16).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlx.core as mx  # noqa: E402

from inference.engine.acceleration.decode_kernels import Cuda, Plan, Reference  # noqa: E402

CALLS = 64


def timed(make) -> tuple[float, float]:
    build, run = [], []
    for attempt in range(33):
        t0 = time.perf_counter()
        outputs = [make(i) for i in range(CALLS)]
        t1 = time.perf_counter()
        mx.eval(outputs)
        t2 = time.perf_counter()
        if attempt >= 3:
            build.append((t1 - t0) / CALLS * 1e6)
            run.append((t2 - t1) / CALLS * 1e6)
    return round(statistics.median(build), 2), round(statistics.median(run), 2)


def main() -> None:
    p = Plan.__new__(Plan)
    p.heads, p.kv_heads, p.dim, p.traditional, p.base, p.scale, p.eps = (
        32,
        8,
        64,
        False,
        500000.0,
        1.0,
        1e-5,
    )
    for batch in (1, 32):
        measure(batch, p)


def measure(batch: int, p: Plan) -> None:
    qkv = mx.random.normal((batch, 1, 48 * 64)).astype(mx.bfloat16)
    x = mx.random.normal((batch, 1, 2048)).astype(mx.bfloat16)
    y = mx.random.normal((batch, 1, 2048)).astype(mx.bfloat16)
    w = mx.ones((2048,), dtype=mx.bfloat16)
    offsets = [mx.array([i], dtype=mx.int32) for i in range(CALLS)]
    q = qkv[..., : 32 * 64].reshape(batch, 32, 1, 64)
    mx.eval(qkv, x, y, w, offsets, q)
    rope = dict(traditional=False, base=500000.0, scale=1.0)
    rows = {
        "custom qkv_rope": lambda i: Cuda.qkv_rope(qkv, offsets[i], p),
        "mlx split+2 rope": lambda i: Reference.qkv_rope(qkv, offsets[i], p),
        "mlx one rope": lambda i: mx.fast.rope(q, 64, offset=offsets[i], **rope),
        "custom add_norm": lambda i: Cuda.add_norm(x, y, w, 1e-5),
        "mlx add + rms_norm": lambda i: Reference.add_norm(x, y, w, 1e-5),
        "mlx add": lambda i: x + y,
    }
    for name, make in rows.items():
        print(f"b{batch} {name:20s} build/eval us per call {timed(make)}", flush=True)


if __name__ == "__main__":
    main()
