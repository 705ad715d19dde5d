"""A batch's per-layer caches as one list: merged from rows, split, extended, filtered.

Our own layers (kv/rows.py) split by a shallow copy filtered on each side (their filters
make new arrays); other batch caches (mlx-lm's, for rotating windows and recurrent state)
are deep-copied first, as mlx-lm's own batches split them.
"""

from __future__ import annotations

import copy

from ..kv.rows import BatchRows, batch_of


def merged(row_caches: list[list]) -> list:
    """The batch caches of rows given as single-sequence caches, layer by layer."""
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
    """Row `row`'s single-sequence caches."""
    return [layer.extract(row) for layer in caches]


def nbytes(caches: list) -> int:
    return sum(layer.nbytes for layer in caches)
