"""Quantized weights that stay quantized on the CPU: MLX Lab's AVX2 matmul.

MLX's CPU quantized matmul is scalar, so the dense path dequantizes every weight to
float32 and reads 538 MB per decode step. The extension in native/quantized_matmul reads
the 4- and 8-bit weights as they are (a sixth of the bytes) and, at prefill sizes, runs
OpenBLAS on dequantized tiles. A model's QuantizedLinear and QuantizedEmbedding layers,
and the experts of its mixture-of-experts layers (mlx-lm's QuantizedSwitchLinear, whose
`gather_qmm` is as scalar on MLX's CPU), are replaced by the twins below, which keep the
same weights, scales and biases.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.models.switch_layers import QuantizedSwitchLinear

from labsettings import engine_settings
from native.quantized_matmul import KernelUnavailable, load

SUPPORTED_BITS = (4, 8)
SUPPORTED_GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class KernelState:
    """Whether the extension can run in this process, and why (not)."""

    available: bool
    reason: str
    description: str | None = None  # e.g. "avx2, 2 threads, OpenBLAS from 16 rows"


_module: ModuleType | None = None
_state: KernelState | None = None


def kernel_state() -> KernelState:
    """Load the extension once per process (with the settings' threads and tunables: see
    native/quantized_matmul); the state says why when it cannot be."""
    global _module, _state
    if _state is None:
        try:
            _module = load()
        except KernelUnavailable as error:
            _state = KernelState(False, str(error))
        else:
            _state = KernelState(True, "the quantized matmul kernel is loaded", _describe(_module))
    return _state


def kernel_module() -> ModuleType:
    """The loaded extension (after kernel_state() said it is available)."""
    assert _module is not None, "kernel_state() first"
    return _module


def fused_decode_enabled() -> bool:
    """Whether decode steps may run as fused layers: an x86 build (AVX2 or AVX-512), unless
    turned off (off: mlx-lm's per-operation graph)."""
    built = _module is not None and hasattr(_module, "decode_qkv")  # an older build has not
    return engine_settings.fused_decode and built and _module.kernel_name() in ("avx2", "avx512")


def fused_kv_float16() -> bool:
    """Whether the fused layers keep their keys and values as float16 (else float32)."""
    return engine_settings.fused_kv_float16


def reset_kernel_state() -> None:
    """Forget the loaded state, so that the next call looks again (tests)."""
    global _module, _state
    _module, _state = None, None


def _describe(module: ModuleType) -> str:
    blas = f"OpenBLAS from {module.blas_min_rows()} rows" if module.blas_found() else "no BLAS"
    return f"{module.kernel_name()}, {module.thread_count()} threads, {blas}"


def quantized_matmul(x: mx.array, module: nn.Module) -> mx.array:
    """`x @ dequantize(weight).T` through the extension, for a layer it supports."""
    return _module.quantized_matmul(
        x, module["weight"], module["scales"], module["biases"], module.group_size, module.bits
    )


def supports(module: nn.Module) -> bool:
    return (
        getattr(module, "mode", "affine") == "affine"
        and module.bits in SUPPORTED_BITS
        and module.group_size in SUPPORTED_GROUP_SIZES
        and module.get("biases") is not None
    )


class KernelLinear(nn.Module):
    """A QuantizedLinear whose matmul runs on the extension; the same parameters."""

    def __init__(self, source: nn.QuantizedLinear):
        super().__init__()
        self.group_size, self.bits, self.mode = source.group_size, source.bits, "affine"
        self.weight, self.scales, self.biases = source["weight"], source["scales"], source["biases"]
        if "bias" in source:
            self.bias = source["bias"]

    def __call__(self, x: mx.array) -> mx.array:
        y = quantized_matmul(x, self)
        return y + self["bias"] if "bias" in self else y


class KernelEmbedding(nn.Module):
    """A QuantizedEmbedding whose tied output projection (`as_linear`) runs on the extension.

    A lookup dequantizes only the rows it gathers, as nn.QuantizedEmbedding does.
    """

    def __init__(self, source: nn.QuantizedEmbedding):
        super().__init__()
        self.group_size, self.bits, self.mode = source.group_size, source.bits, "affine"
        self.num_embeddings, self.dims = source.num_embeddings, source.dims
        self.weight, self.scales, self.biases = source["weight"], source["scales"], source["biases"]

    def __call__(self, tokens: mx.array) -> mx.array:
        return mx.dequantize(
            self["weight"][tokens],
            self["scales"][tokens],
            self["biases"][tokens],
            group_size=self.group_size,
            bits=self.bits,
        )

    def as_linear(self, x: mx.array) -> mx.array:
        return quantized_matmul(x, self)


class KernelSwitchLinear(nn.Module):
    """A QuantizedSwitchLinear (a mixture of experts' projections) whose expert-gathered
    matmul runs on the extension, the rows grouped by expert (each expert's weights read
    once a call); the same parameters."""

    def __init__(self, source: nn.Module):
        super().__init__()
        self.group_size, self.bits, self.mode = source.group_size, source.bits, "affine"
        self.weight, self.scales, self.biases = source["weight"], source["scales"], source["biases"]
        if "bias" in source:
            self.bias = source["bias"]
        self.freeze()

    def __call__(self, x: mx.array, indices: mx.array, sorted_indices: bool = False) -> mx.array:
        # mx.gather_qmm's broadcasting: x's batch dimensions against the indices'.
        batch = mx.broadcast_shapes(x.shape[:-2], indices.shape)
        rows = mx.broadcast_to(x, (*batch, *x.shape[-2:])).reshape(-1, *x.shape[-2:])
        experts = mx.broadcast_to(indices, batch).flatten()
        y = _module.gather_quantized_matmul(
            rows, self["weight"], self["scales"], self["biases"], experts,
            self.group_size, self.bits,
        )  # fmt: skip
        y = y.reshape(*batch, x.shape[-2], y.shape[-1])
        if "bias" in self:
            y = y + mx.expand_dims(self["bias"][indices], -2)
        return y


def switch_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's quantized expert projections (mlx-lm's QuantizedSwitchLinear), where the
    loaded extension has the expert-grouped matmul."""
    if not hasattr(_module, "gather_quantized_matmul"):  # an older build
        return []
    return [
        (name, m)
        for name, m in model.named_modules()
        if type(m) is QuantizedSwitchLinear and getattr(m, "global_scale", None) is None
    ]


def route_through_kernel(model: nn.Module, layers: list[tuple[str, nn.Module]]) -> int:
    """Swap the supported quantized layers (and expert projections) for their kernel
    twins; returns how many."""
    swapped = []
    for name, module in layers:
        if not supports(module):
            continue
        if isinstance(module, QuantizedSwitchLinear):
            twin = KernelSwitchLinear
        elif isinstance(module, nn.QuantizedEmbedding):
            twin = KernelEmbedding
        else:
            twin = KernelLinear
        swapped.append((name, twin(module)))
    model.update_modules(tree_unflatten(swapped))
    return len(swapped)
