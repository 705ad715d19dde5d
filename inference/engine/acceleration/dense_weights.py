"""The CPU fast path's weights: quantized on our kernel, or dense float32, chosen at load.

MLX's CPU quantized matmul is scalar. Two ways around it: the AVX2 kernel of
native/quantized_matmul keeps the weights quantized (quantized_kernel.py); without it,
with OpenBLAS under MLX (cpu_fast_path.py), every quantized layer (and the tied
quantized embedding that doubles as the output layer) is replaced by its dequantized
float32 twin when the memory budget allows (about 40x faster than MLX's own).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

from .cpu_fast_path import blas_state
from .fused_decode import Fusion, fuse_decode_layers
from .quantized_kernel import (
    fused_decode_enabled,
    fused_kv_float16,
    kernel_module,
    kernel_state,
    route_through_kernel,
    supports,
    switch_layers,
)

QUANTIZED_KINDS = (nn.QuantizedLinear, nn.QuantizedEmbedding)
# auto: the quantized kernel where it loads (a third of the memory, ~2x the decode
# speed: docs/BENCHMARKS.md), else dense float32; kernel / dense: that one or MLX's own.
WEIGHT_CHOICES = ("auto", "kernel", "dense")


@dataclass(frozen=True)
class FastPathOptions:
    """Settings of the fast path (MLXLAB_CPU_FAST_PATH, MLXLAB_CPU_WEIGHTS,
    MLXLAB_DENSE_WEIGHT_BUDGET_MB)."""

    enabled: bool = True
    dense_weight_budget_bytes: int = 4 << 30
    weights: str = "auto"

    def __post_init__(self) -> None:
        if self.dense_weight_budget_bytes < 0:
            raise ValueError("the dense weight budget must be at least 0")
        if self.weights not in WEIGHT_CHOICES:
            raise ValueError(f"weights must be one of {', '.join(WEIGHT_CHOICES)}")


@dataclass(frozen=True)
class FastPathReport:
    """Which path a loaded model runs on, and why; shown in /stats."""

    # "kernel" (quantized, on our kernel) | "fast" (dense float32 on OpenBLAS) |
    # "quantized" (MLX's own) | "dense" (the model had no quantized layers)
    path: str
    reason: str
    blas: str | None = None
    dense_weight_bytes: int = 0
    layers_dequantized: int = 0
    layers_on_kernel: int = 0
    kernel: str | None = None  # how the kernel runs, e.g. "avx2, 2 threads, ..."
    quantized_weight_bytes: int = 0  # what the kernel reads: packed weights, scales, biases
    layers_fused: int = 0  # decoder layers run as two native calls (decode and prefill)
    fused_shape: tuple[str, ...] = ()  # what the fused blocks add to Llama's
    not_fused: str | None = None  # why some or all blocks keep mlx-lm's code
    kv_cache: str | None = None  # the fused layers' KV cache type: "float16" or "float32"
    # On a GPU: "CUDA decode step" where the native step takes the model's one-token steps,
    # else why MLX's own graph runs them (cuda_decode.install); None off a GPU.
    gpu_step: str | None = None


class DenseLinear(nn.Module):
    """A float32 Linear stored transposed, (in, out).

    OpenBLAS runs `x @ w` on a row-major (in, out) weight faster than
    `x @ w.T`: 85 instead of 110 ms per decode step here (docs/BENCHMARKS.md).
    """

    def __init__(self, weight: mx.array, bias: mx.array | None = None):
        super().__init__()
        self.weight_t = mx.contiguous(weight.T)
        if bias is not None:
            self.bias = bias

    @property
    def weight(self) -> mx.array:
        return self.weight_t.T

    def __call__(self, x: mx.array) -> mx.array:
        if "bias" in self:
            return mx.addmm(self["bias"], x, self["weight_t"])
        return x @ self["weight_t"]


class DenseEmbedding(nn.Module):
    """A float32 Embedding stored transposed, (dims, vocab), for the tied output layer.

    The output projection reads all of it at every step; a lookup gathers a
    few columns, which costs nothing in comparison.
    """

    def __init__(self, weight: mx.array):
        super().__init__()
        self.weight_t = mx.contiguous(weight.T)

    @property
    def weight(self) -> mx.array:
        return self.weight_t.T

    def __call__(self, tokens: mx.array) -> mx.array:
        return mx.moveaxis(mx.take(self["weight_t"], tokens, axis=1), 0, -1)

    def as_linear(self, x: mx.array) -> mx.array:
        return x @ self["weight_t"]


def quantized_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, QUANTIZED_KINDS)]


def quantized_bytes(module: nn.Module) -> int:
    """Bytes a quantized layer holds as it is: packed weights, scales and biases."""
    return sum(module[name].nbytes for name in ("weight", "scales", "biases") if name in module)


def dense_bytes(module: nn.Module) -> int:
    """Float32 size of a quantized layer once dequantized."""
    rows, packed = module.weight.shape
    return rows * (packed * 32 // module.bits) * 4


def apply_fast_path(model: nn.Module, options: FastPathOptions) -> FastPathReport:
    """Dequantize `model` in place when the fast path applies; say which path it runs on."""
    blas = blas_state()
    layers = quantized_layers(model)
    if not options.enabled:
        return FastPathReport(
            "quantized", "the CPU fast path is turned off (MLXLAB_CPU_FAST_PATH=0)"
        )
    if mx.default_device() != mx.cpu:
        return FastPathReport("quantized", f"the device is {mx.default_device()}, not the CPU")
    if not layers:
        return FastPathReport("dense", "the model has no quantized layers", blas.path)
    kernel = kernel_state()
    if options.weights != "dense" and kernel.available:
        layers = layers + switch_layers(model)  # the experts too: MLX's gather_qmm is scalar
        packed = sum(quantized_bytes(module) for _, module in layers if supports(module))
        count = route_through_kernel(model, layers)
        reason = f"{count} of {len(layers)} quantized layers on the quantized matmul kernel"
        half = fused_kv_float16()
        fusion = (
            fuse_decode_layers(model, kernel_module(), half)
            if fused_decode_enabled()
            else Fusion(0, why_not="the fused layers are off or not built for this CPU")
        )
        fused = fusion.layers
        kv_cache = ("float16" if half else "float32") if fused else None
        if fused:
            reason += f"; {fused} decoder layers run as two native calls each (decode and prefill)"
            reason += f", their keys and values cached as {kv_cache}"
        if fusion.why_not:
            reason += f"; {'some' if fused else 'no'} layers fused: {fusion.why_not}"
        return FastPathReport(
            "kernel",
            reason,
            blas.path,
            layers_on_kernel=count,
            kernel=kernel.description,
            quantized_weight_bytes=packed,
            layers_fused=fused,
            fused_shape=fusion.extras,
            not_fused=fusion.why_not,
            kv_cache=kv_cache,
        )
    if options.weights == "kernel":
        return FastPathReport("quantized", kernel.reason, blas.path)
    if not blas.loaded:
        return FastPathReport("quantized", blas.reason)
    needed = sum(dense_bytes(module) for _, module in layers)
    budget = options.dense_weight_budget_bytes
    if needed > budget:
        return FastPathReport(
            "quantized",
            f"dense weights need {needed >> 20} MB, over the budget of {budget >> 20} MB "
            "(MLXLAB_DENSE_WEIGHT_BUDGET_MB)",
            blas.path,
        )
    count = dequantize_model(model)
    why_not_kernel = "" if options.weights == "dense" else f" ({kernel.reason})"
    return FastPathReport(
        "fast",
        f"{count} quantized layers dequantized to float32 on OpenBLAS{why_not_kernel}",
        blas.path,
        needed,
        count,
    )


def dequantize_model(model: nn.Module) -> int:
    """Replace every quantized Linear / Embedding by a dense float32 one; returns how many."""
    layers = quantized_layers(model)
    for name, module in layers:
        dense = _dense_twin(module)
        mx.eval(dense.parameters())  # one layer at a time keeps the peak memory low
        model.update_modules(tree_unflatten([(name, dense)]))
    return len(layers)


def _dense_twin(module: nn.Module) -> nn.Module:
    weight = mx.dequantize(
        module["weight"],
        module["scales"],
        module.get("biases"),
        group_size=module.group_size,
        bits=module.bits,
        mode=module.mode,
    ).astype(mx.float32)
    if isinstance(module, nn.QuantizedEmbedding):
        return DenseEmbedding(weight)
    return DenseLinear(weight, module.get("bias"))
