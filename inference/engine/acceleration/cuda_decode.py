"""On an NVIDIA GPU, a dense model's one-token decode step as one MLX primitive.

MLX's CUDA backend spends host time on every kernel of a step (it records each into a new
CUDA graph), and on an H200 that host work, not the device, bounded a 1B model's decode
step: 229-276 kernels, 3.4 ms a step, 1.1-1.5 ms of it on the device ("Where a decode
step's time goes" in docs/BENCHMARKS.md's history: git show 02df74b:docs/BENCHMARKS.md).
The step in native/cuda_decode is one node of MLX's graph whose evaluation launches its own
kernels (five a layer) straight on MLX's stream, so the host's work per step no longer grows
with the model's kernels.

It takes the steps that feed one token a row to a model whose every layer is Llama's, with
or without Qwen3's q and k head norms and Qwen2's q/k/v biases, as layer_shape.describe reads a block (by its parts
and their behaviour, not its class), and whose own code computes what the step computes
(checked at install on a few tokens: an embedding or logits scale would show there). Each
layer's q/k/v and gate/up run fused (fused_projections.fused_weights: no active
adapter), each matrix plain or
quantized (MLX's affine 4 or 8 bits, groups of 32 or 64; mlx-community's 4-bit models keep
an 8-bit embedding, say), with plain KV caches (mlx-lm's `KVCache`, or the engine's batch rows: kv/rows.py) in the
model's dtype, up to the batch the native step takes. Everything else (prefill, verifying
passes, quantized caches, larger batches) runs mlx-lm's model as before. The
caches change as mlx-lm's `update_and_fetch` changes them: the same growth, the same
columns, the same offsets. The step writes its column into the cache's own buffer, as
mlx-lm's slice update does when nothing else holds it: the views mlx-lm hands out (state,
extract) end before that column. It writes into a copy instead on the first step after the
caches came from elsewhere (a prefill, a merge, a restore) and after a rewind (a trim, after
which a view taken earlier may cover the column). The weights, and whether an adapter is
active, are checked on that first step: the steps that continue a batch run on what it
began with (the engine switches adapter sets only between batches).

MLXLAB_CUDA_DECODE: on (the default: on a GPU, where the step is built), off, or reference:
the step's contract computed with MLX's own operations (`Reference`, in
cuda_decode_reference.py), on any device, which
the CPU tests run the model's glue against. MLXLAB_CUDA_DECODE_REPLAY: how the step's
kernels reach the GPU (DEFAULT_REPLAY where unset). Both, and MLXLAB_CUDA_DECODE_MAX_BATCH,
are rows of the settings table (labsettings/engine.py), read as `engine_settings`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.models import llama
from mlx_lm.models.cache import KVCache, make_prompt_cache

from labsettings import EngineSettings, engine_settings

from ..kv.rows import RowsKVCache
from . import fused_projections
from .adapters import AdapterSlot
from .cuda_decode_models import eligible, entries, shape_of
from .cuda_decode_reference import Reference
from .cuda_decode_weights import flat, norms_in_the_weights_dtype, rope_freqs, weights_in_order
from .fused_decode import FAR_POSITION
from .layer_shape import Shape, Unfit

log = logging.getLogger(__name__)

VARIABLE = "MLXLAB_CUDA_DECODE"
# Every batch the step takes: its own kernels to 32 rows, its cuBLAS path (from 16 rows) to
# 64, each ahead of MLX's own step on an H200 ("cuBLAS for the matmuls" in
# docs/BENCHMARKS.md's history: git show 02df74b:docs/BENCHMARKS.md).
MAX_BATCH_VARIABLE = "MLXLAB_CUDA_DECODE_MAX_BATCH"
REPLAY_VARIABLE = "MLXLAB_CUDA_DECODE_REPLAY"
_DEFAULTS = EngineSettings.from_environ({})  # the table's, where a variable is unset
DEFAULT_MAX_BATCH = _DEFAULTS.cuda_decode_max_batch
# One graph a batch, replayed: 300/300 greedy tokens as launched, and the fastest of the three
# on the H200 (docs/BENCHMARKS.md, "GPU: the CUDA decode step and its options").
DEFAULT_REPLAY = _DEFAULTS.cuda_decode_replay
STEP = 256  # mlx-lm's cache growth, in columns


def wanted(on_gpu: bool) -> bool:
    """Whether loaded models take the CUDA decode step (MLXLAB_CUDA_DECODE)."""
    mode = engine_settings.cuda_decode
    return mode == "reference" or (on_gpu and mode == "on")


class Plan:
    """The native model over one set of fused weights, and the arrays it was made of."""

    def __init__(self, native, model: nn.Module, shape: Shape, fused: list):
        inner = model["model"]
        layers = inner["layers"]
        weights = weights_in_order(model, fused, **entries(shape))
        self.sources = flat(weights)  # identity: a replaced weight means a new plan
        self.tree = Tree(model)
        self.dtype = inner["norm"]["weight"].dtype
        self.kv_heads, self.head_dim = shape.kv_heads, shape.head_dim
        found, embedding = shape.rope, inner["embed_tokens"]
        self.native = native.Model(
            weights, len(layers), inner["norm"]["weight"].shape[0], shape.heads, shape.kv_heads,
            shape.head_dim, fused[0][1].weight.shape[0] // 2, embedding["weight"].shape[0],
            layers[0]["input_layernorm"].eps, shape.scale, found.scale, found.base,
            found.traditional, rope_freqs(found), shape.qk_norm_eps, shape.qkv_bias,
        )  # fmt: skip
        # A bad value of either is a SettingError, a ValueError: the model keeps mlx-lm's step.
        self.max_batch = min(self.native.max_batch(), engine_settings.cuda_decode_max_batch)
        self.native.replay(engine_settings.cuda_decode_replay)


class Tree:
    """Every module, list and array under a model as they were when it was taken.

    Whether any was since replaced, added or removed is then one pass in C over their
    ids, where walking the layers took 2-4 times as long (on the H200's host: 120-640 us
    for a 1B model or the default model, whose steps take about a millisecond; so a batch
    checks once, at its first step). An adapter slot's state is no item (its active
    adapters are an attribute): a tree holding one never counts as unchanged.
    """

    def __init__(self, root: nn.Module):
        self._dicts, self._lists = [], []
        pending, slots = [root], False
        while pending:
            node = pending.pop()
            slots = slots or type(node) is AdapterSlot
            (self._dicts if isinstance(node, dict) else self._lists).append(node)
            values = node.values() if isinstance(node, dict) else node
            pending += [value for value in values if isinstance(value, (dict, list))]
        self._held = list(self._items())  # no other object takes one of their ids meanwhile
        self._ids = None if slots else list(map(id, self._held))

    def _items(self) -> Iterator:
        dicts = chain.from_iterable(map(dict.values, self._dicts))
        return chain(dicts, chain.from_iterable(self._lists))

    def unchanged(self) -> bool:
        return self._ids is not None and list(map(id, self._items())) == self._ids


class CudaDecodeStep:
    """A model whose one-token steps run the native CUDA step (mixed into its own class).

    Installed by swapping an instance's class: the parameter tree stays mlx-lm's own.
    """

    _mlxlab_own: type  # the model's own class
    _mlxlab_native = None  # the loaded extension
    _mlxlab_plan: Plan | None = None
    _mlxlab_shape: Shape | None = None

    def __call__(self, inputs: mx.array, cache=None, **kwargs):
        one_token = cache and inputs.ndim == 2 and inputs.shape[1] == 1
        if one_token and kwargs.get("input_embeddings") is None:
            logits = self._decode(inputs, cache)
            if logits is not None:
                return logits
        return super().__call__(inputs, cache=cache, **kwargs)

    def _decode(self, inputs: mx.array, caches: list) -> mx.array | None:
        scanned = _scan(caches)
        if scanned is None:
            return None
        batched, column, fresh = scanned
        # Caches the step wrote last continue a batch on the weights it ran on: weights and
        # adapters change between batches (the scheduler switches adapter sets only once a
        # batch is empty), and checking them took 0.1-0.6 ms a step on the H200's host.
        plan = self._mlxlab_plan if not fresh else None
        if plan is None:
            plan = self._plan()
        batch = inputs.shape[0]
        if plan is None or batch > plan.max_batch:
            return None
        if fresh and any(c.keys.dtype != plan.dtype for c in caches):  # else the step's own
            return None
        if fresh or column >= caches[0].keys.shape[2]:
            for cache in caches:
                _reserve(cache, column)
        # else every cache is the step's own last output: row-contiguous, one capacity
        arrays = [array for cache in caches for array in (cache.keys, cache.values)]
        if batched:
            positions, first = caches[0].offset, caches[0].left_padding
        else:
            positions, first = mx.full((batch,), column, mx.int32), mx.zeros((batch,), mx.int32)
        tokens = inputs.reshape(-1)
        if tokens.dtype not in (mx.int32, mx.uint32):
            tokens = tokens.astype(mx.int32)
        out = plan.native.step(tokens, _int32(positions), _int32(first), column, arrays, fresh)
        arrays = None
        after = positions + 1 if batched else column + 1
        for cache, keys, values in zip(caches, out[1::2], out[2::2], strict=True):
            cache.offset = after
            if batched:
                cache.idx += 1
            cache.keys, cache.values = keys, values
            # Ids only: a reference held here would count as one more holder.
            cache._mlxlab_written = (id(keys), id(values), column)
        return out[0]

    def _plan(self) -> Plan | None:
        """The plan for the weights the layers hold now; None where a layer cannot fuse (an
        adapter is active, say)."""
        plan = self._mlxlab_plan
        if plan is not None and plan.tree.unchanged():
            return plan
        fused = []
        for block in self["model"]["layers"]:
            weights = fused_projections.fused_weights(block)
            if weights is None:
                return None
            fused.append(weights)
        shape = self._mlxlab_shape
        try:
            weights = flat(weights_in_order(self, fused, **entries(shape)))
        except TypeError:  # a matrix the step does not take (given a bias since, say)
            return None
        if (
            plan is None
            or len(weights) != len(plan.sources)
            or not all(a is b for a, b in zip(weights, plan.sources, strict=True))
        ):
            plan = Plan(self._mlxlab_native, self, shape, fused)
            object.__setattr__(self, "_mlxlab_plan", plan)
        else:  # the same weights through other modules (an idle adapter slot, say)
            plan.tree = Tree(self)
        return plan


_CLASSES: dict[type, type] = {}


def cuda_class(own: type) -> type:
    """`own` (a model's class) with the native step mixed in, one class for each."""
    if own not in _CLASSES:
        body = {
            "_mlxlab_own": own,
            "__module__": __name__,
            "__qualname__": f"CudaDecode{own.__name__}",
        }
        _CLASSES[own] = type(f"CudaDecode{own.__name__}", (CudaDecodeStep, own), body)
    return _CLASSES[own]


CudaDecodeModel = cuda_class(llama.Model)


def _int32(values: mx.array) -> mx.array:
    return values if values.dtype == mx.int32 else values.astype(mx.int32)


def _scan(caches: list) -> tuple[bool, int, bool] | None:
    """(batched, column, fresh) of caches the step takes, in one pass: plain caches
    of one kind at one column; fresh: written in place only from the next step on, since
    they are not the step's own last output (prefilled, merged or restored since: others
    may hold them) or were rewound (a trim after speculative decoding: a view taken
    before may cover this column)."""
    kind = type(caches[0])
    if kind is not KVCache and kind is not RowsKVCache:
        return None
    batched = kind is RowsKVCache
    column = caches[0].idx if batched else caches[0].offset
    fresh = False
    for cache in caches:
        if type(cache) is not kind or cache.keys is None:
            return None
        if (cache.idx if batched else cache.offset) != column or (
            batched and cache.right_padding is not None
        ):
            return None
        if not fresh:  # the cache holds the step's last output, and column is past it
            written = getattr(cache, "_mlxlab_written", None)
            fresh = (
                written is None
                or written[0] != id(cache.keys)
                or written[1] != id(cache.values)
                or column <= written[2]
            )
    return batched, column, fresh


def _reserve(cache, column: int) -> None:
    """Grow the cache to hold `column` as mlx-lm's update_and_fetch grows it for one token,
    and make its buffers row-contiguous (the native step writes them directly)."""
    keys, values = cache.keys, cache.values
    if column + 1 > keys.shape[2]:
        if column % STEP:
            keys, values = keys[..., :column, :], values[..., :column, :]
        shape = (*keys.shape[:2], STEP, keys.shape[3])
        keys = mx.concatenate([keys, mx.zeros(shape, keys.dtype)], axis=2)
        values = mx.concatenate(
            [values, mx.zeros((*shape[:3], values.shape[3]), values.dtype)], axis=2
        )
        cache.keys, cache.values = keys, values
    elif getattr(cache, "_mlxlab_written", (None, None))[:2] != (id(keys), id(values)):
        cache.keys, cache.values = mx.contiguous(keys), mx.contiguous(values)


@dataclass(frozen=True)
class Installed:
    """Whether install() gave a model the step (its truth), and if not why."""

    why_not: str | None = None

    def __bool__(self) -> bool:
        return self.why_not is None


def install(model: nn.Module, native=None) -> Installed:
    """Give `model` the CUDA decode step where it computes what the model computes; returns
    whether it did, and why not. `native`: the loaded extension (native.cuda_decode.load()
    by default)."""
    if isinstance(model, CudaDecodeStep):
        model.__class__ = model._mlxlab_own
    norms = norms_in_the_weights_dtype(model)
    installed = _install(model, native)
    if not installed:
        log.info("the CUDA decode step does not take this model: %s", installed.why_not)
        if norms:
            model.update(tree_unflatten(norms))  # as it came
    elif norms:
        log.info("the CUDA decode step runs the model's %d float32 norms in %s, as its other "
                 "weights", len(norms), model["model"]["norm"]["weight"].dtype)  # fmt: skip
    return installed


def _install(model: nn.Module, native) -> Installed:
    shape = shape_of(model)
    if isinstance(shape, Unfit):
        return Installed(shape.reason)
    if not eligible(model):
        return Installed("a weight of a kind or dtype the step does not read")
    if native is None and engine_settings.cuda_decode == "reference":
        native = Reference
    if native is None:
        from native.cuda_decode import StepUnavailable, load

        try:
            native = load()
        except StepUnavailable as why:
            return Installed(str(why))
    own = type(model)
    model.__class__ = cuda_class(own)
    object.__setattr__(model, "_mlxlab_native", native)
    object.__setattr__(model, "_mlxlab_plan", None)
    object.__setattr__(model, "_mlxlab_shape", shape)
    try:
        if model._plan() is None:
            why = "a layer whose projections do not fuse (biased or mixed)"
        else:
            why = None if _agrees(model, own) else "its logits differ from the model's own code's"
    except ValueError as error:  # a shape the native step lacks (its heads' width, say)
        why = str(error)
    if why is not None:
        model.__class__ = own
    return Installed(why)


def _agrees(model: nn.Module, own: type) -> bool:
    """Whether two steps give the logits the model's own code gives, after a short prompt
    and far into a sequence (caches of zeros): what a block's description cannot say (an
    embedding or logits scale, an attention scale that moves with the position) shows here."""
    starts = [(mx.array([[1, 2, 3, 4]]), None), (None, FAR_POSITION)]
    for prompt, far in starts:
        ours, theirs = make_prompt_cache(model), make_prompt_cache(model)
        for caches in (ours, theirs):
            if far is not None:
                _zeros_to(caches, far, model._mlxlab_plan)
            else:
                own.__call__(model, prompt, cache=caches)
        token = mx.array([[5]])
        for _ in range(2):
            got = model(token, cache=ours).astype(mx.float32)
            want = own.__call__(model, token, cache=theirs).astype(mx.float32)
            if mx.abs(got - want).max().item() > 0.05 * (1.0 + mx.abs(want).max().item()):
                return False
            token = mx.argmax(want[:, -1], axis=-1)[:, None]
    return True


def _zeros_to(caches: list, offset: int, plan: Plan) -> None:
    """Caches of zero keys and values up to `offset`, as a sequence that far would leave them."""
    shape = (1, plan.kv_heads, offset + (-offset) % STEP, plan.head_dim)
    for cache in caches:
        cache.keys, cache.values = mx.zeros(shape, plan.dtype), mx.zeros(shape, plan.dtype)
        cache.offset = offset
