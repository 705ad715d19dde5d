"""decode_kernels.py's CUDA kernels against MLX's own operations, on random inputs.

    python3 bench/gpu_kernels_check.py        # on a CUDA GPU; prints one line per case

For each case: how many output elements differ from the reference, and the largest
difference (bf16, the Llama-1B shape's heads and hidden size).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mlx.core as mx  # noqa: E402

from inference.engine.acceleration.decode_kernels import Cuda, Plan, Reference  # noqa: E402


def plan(heads=32, kv_heads=8, dim=64, traditional=False, base=500000.0, scale=1.0) -> Plan:
    p = Plan.__new__(Plan)
    p.heads, p.kv_heads, p.dim = heads, kv_heads, dim
    p.traditional, p.base, p.scale, p.eps = traditional, base, scale, 1e-5
    return p


def differ(a: mx.array, b: mx.array) -> tuple[int, float]:
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    return int((a != b).sum().item()), float(mx.abs(a - b).max().item())


def main() -> None:
    mx.random.seed(0)
    for traditional, base, scale in ((False, 500000.0, 1.0), (True, 10000.0, 0.25)):
        p = plan(traditional=traditional, base=base, scale=scale)
        for batch in (1, 8, 32):
            width = (p.heads + 2 * p.kv_heads) * p.dim
            qkv = mx.random.normal((batch, 1, width)).astype(mx.bfloat16)
            for label, offset in (
                ("int", mx.array([1234], dtype=mx.int32)),
                ("rows", mx.random.randint(-5, 3000, (batch,)).astype(mx.int32)),
            ):
                got = Cuda.qkv_rope(qkv, offset, p)
                want = Reference.qkv_rope(qkv, offset, p)
                mx.eval(got, want)
                result = [differ(g, w) for g, w in zip(got, want, strict=True)]
                shapes = [tuple(g.shape) == tuple(w.shape) for g, w in zip(got, want, strict=True)]
                print(f"qkv_rope trad={traditional} b{batch} {label}: {result} shapes {shapes}")
    for batch in (1, 8, 32):
        for dim in (2048, 576):
            x = mx.random.normal((batch, 1, dim)).astype(mx.bfloat16)
            y = mx.random.normal((batch, 1, dim)).astype(mx.bfloat16)
            w = (1 + 0.1 * mx.random.normal((dim,))).astype(mx.bfloat16)
            got, want = Cuda.add_norm(x, y, w, 1e-5), Reference.add_norm(x, y, w, 1e-5)
            mx.eval(got, want)
            result = [differ(g, r) for g, r in zip(got, want, strict=True)]
            print(f"add_norm b{batch} dim{dim}: {result}")


if __name__ == "__main__":
    main()
