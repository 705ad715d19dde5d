"""The table's rows for the engine (inference/engine) and the native libraries (native/).

A model worker's engine has no Django: it reads these rows as `engine_settings`, from the
process environment, and the Python that loads a C++ library hands it their values. The
BLAS rows are read before anything imports MLX (inference/engine/acceleration/cpu_fast_path.py), long
before Django would build `settings.MLXLAB`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .parsers import one_of, optional, parse_bool, parse_int, switch
from .rows import Table, setting

# How the CUDA decode step's kernels reach the GPU: launched one by one, as a CUDA graph
# captured every step, or a graph kept a batch and replayed (the fastest on an H200).
CUDA_DECODE_REPLAY_MODES = ("launched", "captured", "kept")


@dataclass(frozen=True)
class EngineSettings(Table):
    """The engine's CPU fast path and quantized kernel, and its GPU decode paths."""

    # The CPU fast path (docs/BENCHMARKS.md): 4/8-bit weights on the quantized kernel
    # (native/quantized_matmul, built by make setup), else OpenBLAS under MLX and dense
    # float32 weights.
    cpu_fast_path: bool = setting(
        "MLXLAB_CPU_FAST_PATH", parse_bool, True, "OpenBLAS and dense float32 weights on CPU."
    )
    blas_path: str | None = setting(
        "MLXLAB_BLAS_PATH", optional(str), None,
        "The OpenBLAS to load under MLX; unset: the ngsolve-openblas wheel's, then the system's.",
    )  # fmt: skip
    blas_threads: int = setting("MLXLAB_BLAS_THREADS", parse_int, 1, "OpenBLAS's threads.")
    dense_weight_budget_mb: int = setting(
        "MLXLAB_DENSE_WEIGHT_BUDGET_MB", parse_int, 4096,
        "Dense float32 weights above this stay quantized.",
    )  # fmt: skip
    cpu_weights: str = setting(
        "MLXLAB_CPU_WEIGHTS", one_of("auto", "kernel", "dense"), "auto",
        "auto: quantized on the AVX2 kernel where it built, else dense float32; "
        "kernel or dense: that one only.",
    )  # fmt: skip
    # Blank means off here, not unset: extension.locate tells the two apart.
    qmm_library: str | None = setting(
        "MLXLAB_QMM_LIBRARY", str, None,
        "Another build of the quantized kernel; empty, 0 or off: none (unset: make setup's).",
    )  # fmt: skip
    # The kernel's own threads claim work as they come, and when one is descheduled
    # mid-claim the kernel runs on the caller alone for a while (src/thread_pool.h).
    qmm_threads: int = setting(
        "MLXLAB_QMM_THREADS", parse_int, 0,
        "The kernel's threads; 0: every CPU the process may run on (1 leaves the others free).",
    )  # fmt: skip
    # Long enough to span the gaps between a step's matmuls, short enough to sleep between steps.
    qmm_spin_us: int = setting(
        "MLXLAB_QMM_SPIN_US", parse_int, 200,
        "Microseconds an idle kernel thread spins before it sleeps.",
    )  # fmt: skip
    # Below it a thread's wake-up costs more than it saves.
    qmm_parallel_min: int = setting(
        "MLXLAB_QMM_PARALLEL_MIN", parse_int, 1 << 16,
        "Weights x rows below which a kernel call stays on one thread.",
    )  # fmt: skip
    qmm_avx512: bool = setting(
        "MLXLAB_QMM_AVX512", parse_bool, True,
        "Decode rows on the AVX-512 tiles where the CPU has them; off: the AVX2 tiles.",
    )  # fmt: skip
    # Opt-in: about 1% of a product off, so greedy output may differ from MLX's.
    qmm_int8: bool = setting(
        "MLXLAB_QMM_INT8", parse_bool, False,
        "The kernel's decode matmuls take x as int8 per 32 values, as llama.cpp's.",
    )  # fmt: skip
    qmm_int16: bool = setting(
        "MLXLAB_QMM_INT16", parse_bool, False,
        "The kernel's decode matmuls take x as int16 per 32 values (about 2e-5 of the output off).",
    )  # fmt: skip
    fused_decode: bool = setting(
        "MLXLAB_FUSED_DECODE", parse_bool, True,
        "Llama-family layers' decode steps, prefill and verifying passes as two kernel calls "
        "a layer; off: mlx-lm's layers.",
    )  # fmt: skip
    # As llama.cpp keeps it: attention reads half the bytes each step.
    fused_kv_float16: bool = setting(
        "MLXLAB_FUSED_KV_FLOAT16", parse_bool, True,
        "The fused layers' KV cache in float16; off: float32, as the rest of the CPU path.",
    )  # fmt: skip

    # On a GPU (docs/BENCHMARKS.md has each one's measurements). `reference` computes a
    # native path's contract with MLX's own operations, on any device: the CPU tests.
    fused_projections: str = setting(
        "MLXLAB_FUSED_PROJECTIONS", switch("force"), "on",
        "A dense Llama-family layer's q/k/v and gate/up projections as one matmul each: "
        "on (a GPU), off, or force (any device).",
    )  # fmt: skip
    # Off: a custom kernel's call costs the host more than the kernels it saves.
    decode_kernels: str = setting(
        "MLXLAB_DECODE_KERNELS", switch("qkv", "all", "reference"), "off",
        "Custom CUDA kernels on fused layers' one-token steps: on or qkv (RoPE), "
        "all (also add and norm), reference, or off.",
    )  # fmt: skip
    # Off: no gain stood out of the H200's run-to-run noise.
    compiled_mlp: str = setting(
        "MLXLAB_COMPILED_MLP", switch("force"), "off",
        "Decode steps run a Llama layer's norm, MLP and residual as one mx.compile'd graph: "
        "on (a GPU), off, or force (any device).",
    )  # fmt: skip
    # Below it one stream and batch 4 swung from 0.6x to 1.6x between runs.
    compiled_mlp_min_batch: int = setting(
        "MLXLAB_COMPILED_MLP_MIN_BATCH", parse_int, 8,
        "The fewest rows a decode step needs to run the compiled MLP half (at least 1).",
    )  # fmt: skip
    cuda_decode: str = setting(
        "MLXLAB_CUDA_DECODE", switch("reference"), "on",
        "A dense Llama model's one-token decode step as one native primitive "
        "(native/cuda_decode): on (a GPU, where it built), off, or reference.",
    )  # fmt: skip
    # Its own kernels to 32 rows, its cuBLAS path (from 16 rows) to 64.
    cuda_decode_max_batch: int = setting(
        "MLXLAB_CUDA_DECODE_MAX_BATCH", parse_int, 64,
        "The most rows the CUDA decode step takes (and at most what its build takes).",
    )  # fmt: skip
    # kept: 300/300 greedy tokens as launched, and the fastest of the three on an H200.
    cuda_decode_replay: str = setting(
        "MLXLAB_CUDA_DECODE_REPLAY", one_of(*CUDA_DECODE_REPLAY_MODES), "kept",
        "How the step's kernels reach the GPU: a CUDA graph kept a batch, captured each step, "
        "or launched one by one.",
    )  # fmt: skip
    cuda_decode_library: str | None = setting(
        "MLXLAB_CUDA_DECODE_LIBRARY", str, None,
        "Another build of the CUDA decode step; empty, 0 or off: none (unset: make setup's).",
    )  # fmt: skip
    cuda_archs: str = setting(
        "MLXLAB_CUDA_ARCHS", str.strip, "native",
        "The GPUs make setup compiles the CUDA decode step for (CMAKE_CUDA_ARCHITECTURES).",
    )  # fmt: skip
