"""On a GPU, each decode step's MLP half of a Llama block as one compiled graph.

MLX's CUDA backend pays a launch and host work per operation. A probe on mlx-lm's own
batch path decoded 34-42% faster at batch 32 when each layer's second half (post-attention
norm, gate and up, swiglu, down, residual) ran as one `mx.compile`d function. In the
engine, measured with and without it side by side on an H200, it gained in some runs and
lost in others, inside that machine's run-to-run noise (docs/BENCHMARKS.md, "GPU: the
CUDA decode step and its options"), so it ships off: MLXLAB_COMPILED_MLP=1 turns it on.
Then decode steps (one token a row) of at least `min_batch` rows run the compiled half;
prefill, verifying passes and smaller batches run mlx-lm's block unchanged.

Layers with fused projections (fused_projections.py, on by default on a GPU) are not
eligible: MLXLAB_FUSED_PROJECTIONS=0 gives this switch the dense Llama layers back.

The norm's and the MLP's parameters are the compiled function's captured inputs, read
again on every call: reloaded or updated weights apply at once. A projection wrapped in an
adapter slot with an active adapter runs mlx-lm's block (the slot's updates are Python
closures that no input tree carries); a new set of modules gets a new compiled function.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama

from labsettings import EngineSettings, engine_settings

from .adapters import AdapterSlot
from .dense_weights import DenseLinear

log = logging.getLogger(__name__)

VARIABLE = "MLXLAB_COMPILED_MLP"  # off (default): never; on: on a GPU; force: any device
MIN_BATCH_VARIABLE = "MLXLAB_COMPILED_MLP_MIN_BATCH"
# Below it one stream and batch 4 swung from 0.6x to 1.6x between runs (docs/BENCHMARKS.md).
DEFAULT_MIN_BATCH = EngineSettings.from_environ({}).compiled_mlp_min_batch
MLP = ("gate_proj", "up_proj", "down_proj")
# Layers whose output is a function of their parameter tree alone (exact types: a subclass
# may call an extension or keep state outside the tree).
PLAIN_LINEARS = (nn.Linear, nn.QuantizedLinear, DenseLinear)


def wanted(on_gpu: bool) -> bool:
    """Whether loaded models get the compiled MLP half (MLXLAB_COMPILED_MLP)."""
    mode = engine_settings.compiled_mlp
    return mode == "force" or (on_gpu and mode == "on")


def min_batch() -> int:
    """The fewest rows a decode step needs to run the compiled half."""
    return max(1, engine_settings.compiled_mlp_min_batch)


def _projections(block: llama.TransformerBlock) -> tuple[nn.Module, ...]:
    # Item lookups: a Module's __getattr__ is a Python call, on every layer of every step.
    mlp = block["mlp"]
    return (block["post_attention_layernorm"], mlp, *(mlp[name] for name in MLP))


def _plain(layer: nn.Module) -> bool:
    if type(layer) is AdapterSlot:
        return not layer.active and type(layer.base) in PLAIN_LINEARS
    return type(layer) in PLAIN_LINEARS


def eligible(block: nn.Module) -> bool:
    """Whether the compiled half computes exactly what this block's second half does."""
    if type(block) not in (llama.TransformerBlock, CompiledMLPBlock):
        return False
    norm, mlp, *linears = _projections(block)
    return type(norm) is nn.RMSNorm and type(mlp) is llama.MLP and all(map(_plain, linears))


class CompiledMLPBlock(llama.TransformerBlock):
    """mlx-lm's Llama block, its MLP half compiled on decode steps of enough rows.

    Installed by swapping an instance's class, so that the parameter tree (loading,
    adapters, the prompt cache's identity) stays mlx-lm's own.
    """

    _mlxlab_min_batch: int = DEFAULT_MIN_BATCH
    _mlxlab_half: tuple[tuple[nn.Module, ...], Callable[[mx.array], mx.array]] | None = None
    # Shapes the compiled half was traced for: a trace is a compile, which the warm-up
    # must do before ready (tests read this).
    _mlxlab_traced: set[tuple[int, ...]]

    def __call__(self, x: mx.array, mask=None, cache=None) -> mx.array:
        rows, length = x.shape[0], x.shape[1]
        half = self._half() if length == 1 and rows >= self._mlxlab_min_batch else None
        if half is None:
            return super().__call__(x, mask, cache)
        # mlx-lm's attention half as it is; the rest in one graph.
        return half(x + self.self_attn(self.input_layernorm(x), mask, cache))

    def _half(self) -> Callable[[mx.array], mx.array] | None:
        """The compiled half while the modules are the ones it was built for and plain."""
        modules = _projections(self)
        if not all(map(_plain, modules[2:])):
            return None
        built = self._mlxlab_half
        if built is None or not all(a is b for a, b in zip(built[0], modules, strict=True)):
            built = (modules, _compile(self, modules[0], modules[1]))
            # Not through Module.__setattr__, which would file a tuple among the parameters.
            object.__setattr__(self, "_mlxlab_half", built)
        return built[1]


def _compile(block: CompiledMLPBlock, norm: nn.Module, mlp: nn.Module):
    traced = block._mlxlab_traced

    def half(h: mx.array) -> mx.array:
        traced.add(tuple(h.shape))  # runs only while mx.compile traces
        return h + mlp(norm(h))

    # The modules are the captured inputs: their arrays are read on every call, not baked in.
    return mx.compile(half, inputs=[norm, mlp])


def compile_mlp_halves(model: nn.Module, *, min_rows: int | None = None) -> int:
    """Give every eligible Llama block of `model` the compiled MLP half; returns how many."""
    layers = getattr(getattr(model, "model", None), "layers", None) or []
    rows = min_batch() if min_rows is None else min_rows
    count = 0
    for block in layers:
        if eligible(block):
            block.__class__ = CompiledMLPBlock
            object.__setattr__(block, "_mlxlab_min_batch", rows)
            object.__setattr__(block, "_mlxlab_half", None)
            object.__setattr__(block, "_mlxlab_traced", set())
            count += 1
    if count:
        log.info("%s decoder layers compile their MLP half at %s rows and more", count, rows)
    return count
