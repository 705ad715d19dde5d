"""A block's RoPE as the native layers compute it: MLX's plain RoPE from its own public
attributes; the scaled kinds (Llama 3, YaRN, LongRoPE) as a table of periods (MLX's
`freqs`: theta_i = position / period_i) computed from the model's config, by the formulas of their papers and of
Hugging Face's implementations, which mlx-lm's modules follow.

A module of another kind (dynamic NTK, whose frequencies move with the sequence length)
gets a reason instead, and its block keeps mlx-lm's code. The table is checked with the
rest of the block at load, at a far position too (fused_decode._agrees).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np


@dataclass(frozen=True)
class Rope:
    """The rotation of the first `dims` of each head: theta_i = position * scale *
    base^(-2i/dims), or position / periods[i] where there is a table; the rotated part
    first multiplied by mscale."""

    dims: int
    base: float
    scale: float
    traditional: bool
    periods: tuple[float, ...] | None = None
    mscale: float = 1.0
    kind: str = "default"

    def extras(self) -> tuple[str, ...]:
        """What it adds to a plain RoPE, in words."""
        return () if self.kind == "default" else (f"{self.kind} RoPE",)


def rope_of(rope: nn.Module, head_dim: int, config) -> Rope | str:
    """The Rope of a block's `rope` module, or why the native layers do not compute it."""
    if _is_identity(rope, head_dim):  # SmolLM3's NoPE layers: every period infinite
        return Rope(head_dim, 1.0, 1.0, False, (math.inf,) * (head_dim // 2), kind="no")
    dims = getattr(rope, "dims", getattr(rope, "dim", None))
    if not isinstance(dims, int) or dims > head_dim or dims % 2:
        return "a RoPE over no even part of the head"
    partial = dims < head_dim
    if type(rope) is nn.RoPE:
        kind = "partial" if partial else "default"
        return Rope(dims, float(rope.base), float(rope.scale), bool(rope.traditional), kind=kind)
    scaling = _scaling(config)
    kind = (scaling or {}).get("type") or (scaling or {}).get("rope_type")
    base = getattr(config, "rope_theta", None)
    if kind not in TABLES or not isinstance(base, (int, float)):
        return f"a RoPE of kind {kind or type(rope).__name__} the native layers do not compute"
    try:
        periods, mscale = TABLES[kind](dims, float(base), scaling, config)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
        return f"a {kind} RoPE whose config the native layers cannot read ({error})"
    traditional = bool(getattr(rope, "traditional", False))
    table = tuple(float(v) for v in periods.astype(np.float32))
    return Rope(dims, float(base), 1.0, traditional, table, float(mscale), kind)


def _is_identity(rope: nn.Module, head_dim: int) -> bool:
    """Whether the module leaves a head as it is, far into a sequence (a layer without
    RoPE), told by one call: a rotation moves a random vector there."""
    if type(rope) is nn.RoPE or rope.parameters() or head_dim % 2:
        return False
    x = mx.random.normal((1, 1, 2, head_dim), key=mx.random.key(3))
    try:
        return bool(mx.array_equal(rope(x, offset=1000), x).item())
    except Exception:  # a module called otherwise: not the identity this takes
        return False


def _scaling(config) -> dict | None:
    scaling = getattr(config, "rope_scaling", None)
    return scaling if isinstance(scaling, dict) else None


def _base_periods(dims: int, base: float) -> np.ndarray:
    return base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)


def _llama3(dims: int, base: float, scaling: dict, config) -> tuple[np.ndarray, float]:
    """Llama 3.1's: long wavelengths stretched by `factor`, short ones kept, a smooth ramp
    between."""
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    context = scaling.get("original_max_position_embeddings", 8192)
    periods = _base_periods(dims, base)
    wavelengths = 2 * math.pi * periods
    stretched = np.where(wavelengths > context / low, periods * factor, periods)
    smooth = (context / wavelengths - low) / (high - low)
    ramped = stretched / ((1 - smooth) / factor + smooth)
    medium = (wavelengths > context / high) & (wavelengths < context / low)
    return np.where(medium, ramped, stretched), 1.0


def _yarn(dims: int, base: float, scaling: dict, config) -> tuple[np.ndarray, float]:
    """YaRN's: interpolated and extrapolated periods blended over a ramp of dimensions,
    the rotated part scaled by the ratio of its two attention temperatures."""
    factor = scaling["factor"]
    context = scaling.get("original_max_position_embeddings", 4096)
    fast, slow = scaling.get("beta_fast", 32), scaling.get("beta_slow", 1)

    def dimension(rotations: float) -> float:
        return dims * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dimension(fast)), 0)
    high = min(math.ceil(dimension(slow)), dims - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dims // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolated = _base_periods(dims, base)
    interpolated = factor * extrapolated
    keep = 1.0 - ramp
    periods = (interpolated * extrapolated) / (interpolated * keep + extrapolated * (1 - keep))

    def temperature(mscale: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0

    mscale = temperature(scaling.get("mscale", 1)) / temperature(scaling.get("mscale_all_dim", 0))
    return periods, mscale


def _longrope(dims: int, base: float, scaling: dict, config) -> tuple[np.ndarray, float]:
    """Phi-3's LongRoPE, as mlx-lm runs it: the long factors at every length, the rotated
    part scaled by sqrt(1 + ln(s) / ln(original context))."""
    factors = np.asarray(scaling["long_factor"], dtype=np.float64)
    context = scaling.get("original_max_position_embeddings") or getattr(
        config, "original_max_position_embeddings", None
    )
    factor = config.max_position_embeddings / context
    mscale = scaling.get("long_mscale") or (
        1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(context))
    )
    return factors * _base_periods(dims, base), mscale


def _proportional(dims: int, base: float, scaling: dict, config) -> tuple[np.ndarray, float]:
    """Gemma 4's: the first part of each head rotated at periods of the whole head's
    spacing, times `factor`; the rest not at all (an infinite period)."""
    rotated = int(dims * scaling.get("partial_rotary_factor", 1.0))
    periods = scaling.get("factor", 1.0) * base ** (np.arange(0, rotated, 2) / dims)
    return np.concatenate([periods, np.full((dims - rotated) // 2, np.inf)]), 1.0


TABLES = {
    "llama3": _llama3,
    "yarn": _yarn,
    "deepseek_yarn": _yarn,
    "telechat3-yarn": _yarn,
    "longrope": _longrope,
    "su": _longrope,
    "proportional": _proportional,
}
