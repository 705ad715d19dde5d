"""The quantized matmul kernel alone: CPU time per call, GB/s and GFLOP/s, against MLX's.

    .venv/bin/python bench/qmm_kernel.py

One thread (the engine's default); CPU time, not wall time, as the machine may be shared.
MLXLAB_QMM_INT8=1 runs the opt-in int8-activation variant; each line then also says its
largest error against MLX's, relative to the largest output. The kernel alone, without
MLX's ~45 us of eval per call: native/quantized_matmul/bench/qmm_bench.cpp.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

# The engine package loads OpenBLAS; MLX must be imported after it (in the functions).
from inference.engine.acceleration import quantized_kernel  # noqa: E402

# The default model's shapes: an MLP projection (4-bit) and the tied output layer (8-bit).
SHAPES = ((4, 1536, 576), (4, 576, 1536), (8, 49152, 576))


def cpu_seconds(call, reps: int) -> float:
    import mlx.core as mx

    mx.eval(call())
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(reps):
            mx.eval(call())
        best = min(best, (time.process_time() - started) / reps)
    return best


def main() -> None:
    import mlx.core as mx

    state = quantized_kernel.kernel_state()
    if not state.available:
        sys.exit(state.reason)
    kernel = quantized_kernel._module
    # An older build (MLXLAB_QMM_LIBRARY) has no int8 variant.
    int8 = getattr(kernel, "int8_activations", bool)()
    print(state.description, "(int8 activations)" if int8 else "")
    for bits, columns, depth in SHAPES:
        w, scales, biases = mx.quantize(
            mx.random.normal((columns, depth)), group_size=32, bits=bits
        )
        scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
        nbytes = w.nbytes + scales.nbytes + biases.nbytes
        reps = max(2, 20_000_000 // (columns * depth))
        for rows in (1, 2, 4, 8, 32, 128):
            x = mx.random.normal((rows, depth))
            mx.eval(x, w, scales, biases)
            ours = cpu_seconds(
                partial(kernel.quantized_matmul, x, w, scales, biases, 32, bits), reps
            )
            line = f"{bits}-bit {columns}x{depth} rows {rows:3d}: {ours * 1e6:8.0f} us "
            line += f"{nbytes / ours / 1e9:5.1f} GB/s {2 * rows * columns * depth / ours / 1e9:5.1f} GFLOP/s"
            if int8:
                want = mx.quantized_matmul(x, w, scales, biases, group_size=32, bits=bits)
                got = kernel.quantized_matmul(x, w, scales, biases, 32, bits)
                error = mx.abs(got - want).max() / mx.abs(want).max()
                line += f" error {error.item():.1e}"
            if rows == 1:
                mlx = cpu_seconds(
                    partial(mx.quantized_matmul, x, w, scales, biases, group_size=32, bits=bits), 2
                )
                line += f" | MLX's {mlx * 1e6:8.0f} us"
            print(line, flush=True)


if __name__ == "__main__":
    main()
