"""A batch's per-layer caches as one list: merged from rows, split, extended, filtered.

Our own layers (kv/rows.py) split by a shallow copy filtered on each side (their filters
make new arrays); other batch caches (mlx-lm's, for rotating windows and recurrent state)
are deep-copied first, as mlx-lm's own batches split them.

A model whose rows cannot share a batch is served one row at a time (`unbatchable`): a
cache kind that cannot merge rows (chunked attention, say), or model code that takes no
batch of rows (positions from a plain int offset, a mask that does not broadcast over
grouped heads), which a two-row probe finds at load. A lone row's batch is its own cache
where that cannot merge, and no filter, split or extend ever reaches it.
"""

from __future__ import annotations

import copy

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, make_prompt_cache

from ..kv.rows import BatchRows, batch_of


def unbatchable(model) -> str | None:
    """Why the model's rows cannot share a batch, or None where they can."""
    kinds = {type(cache).__name__ for cache in make_prompt_cache(model) if not _mergeable(cache)}
    if kinds:
        return f"its {', '.join(sorted(kinds))} cannot merge rows: served one row at a time"
    try:
        for lengths in ([3, 1], [3, 1, 2]):
            _probe(model, lengths)
    except Exception as exc:
        why = (
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            if str(exc)
            else type(exc).__name__
        )
        return f"its model code takes no batch of rows ({why}): served one row at a time"
    return None


def _probe(model, lengths: list[int]) -> None:
    """A prompt step and a decode step of rows of these lengths, as the batch runs them
    (right padding rolled left), on throwaway caches. Two row counts: a mask that does not
    broadcast over grouped heads can still broadcast where the rows match the KV heads."""
    caches = merged([make_prompt_cache(model) for _ in lengths])
    width = max(lengths)
    for cache in caches:
        cache.prepare(lengths=lengths, right_padding=[width - n for n in lengths])
    prompts = [[1 + i] * n + [0] * (width - n) for i, n in enumerate(lengths)]
    model(mx.array(prompts), cache=caches)
    for cache in caches:
        cache.finalize()
    mx.eval(model(mx.array([[4]] * len(lengths)), cache=caches))


def prefills_alone(model) -> str | None:
    """Why the model's prompts must prefill one at a time, or None: a recurrent layer's
    state (mlx-lm's ArraysCache: state-space and linear-attention layers) runs through the
    right padding of a shorter prompt prefilled beside a longer one, and its tokens then
    differ from the prompt's alone (as in mlx-lm's own batch generator). Unpadded, each
    row's state is its own; decode steps pad no recurrent state."""
    caches = make_prompt_cache(model)
    flat = [c for cache in caches for c in getattr(cache, "caches", (cache,))]
    if not any(isinstance(cache, ArraysCache) for cache in flat):
        return None
    return "its recurrent layers' state would take in padding: prompts prefill one at a time"


def _mergeable(cache) -> bool:
    return hasattr(cache, "merge")


def merged(row_caches: list[list]) -> list:
    """The batch caches of rows given as single-sequence caches, layer by layer (one row of
    an unbatchable model: its own caches)."""
    if len(row_caches) == 1 and not all(map(_mergeable, row_caches[0])):
        return list(row_caches[0])
    return [batch_of([cache[layer] for cache in row_caches]) for layer in range(len(row_caches[0]))]


def extended(caches: list, more: list) -> list:
    """`caches` with `more`'s rows after its own (either may be empty)."""
    if not caches:
        return more
    for mine, theirs in zip(caches, more, strict=True):
        mine.extend(theirs)
    return caches


def filtered(caches: list, keep: list[int]) -> list:
    if not keep:
        return []
    for layer in caches:
        layer.filter(keep)
    return caches


def split(caches: list, rows: list[int], rest: list[int]) -> tuple[list, list]:
    """(the caches of `rows`, those of `rest`), from one batch's caches."""
    taken = [copy.copy(c) if isinstance(c, BatchRows) else copy.deepcopy(c) for c in caches]
    return filtered(taken, rows), filtered(caches, rest)


def extract(caches: list, row: int) -> list:
    """Row `row`'s single-sequence caches (a copy of an unbatchable model's own)."""
    return [layer.extract(row) if hasattr(layer, "extract") else copy.deepcopy(layer)
            for layer in caches]  # fmt: skip


def nbytes(caches: list) -> int:
    return sum(layer.nbytes for layer in caches)
