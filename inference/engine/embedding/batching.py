"""Inputs of many lengths into few forward passes: sorted by length, grouped in buckets
(powers of two), each group padded to its longest input and kept under a token budget.

Sorting first keeps padding small; the buckets keep a short text out of a pass of long
ones. The attention mask makes padding invisible, so an input's vector does not depend on
which batch it lands in (within float rounding).
"""

from __future__ import annotations

from dataclasses import dataclass

SMALLEST_BUCKET = 16  # tokens: shorter inputs share one bucket


@dataclass(frozen=True)
class Batch:
    """Inputs (indices into the request's list) run in one forward pass of `length` tokens."""

    indices: tuple[int, ...]
    length: int

    @property
    def padded_tokens(self) -> int:
        return len(self.indices) * self.length


def bucket_of(length: int) -> int:
    """The bucket an input of `length` tokens falls in: the power of two that holds it."""
    bucket = SMALLEST_BUCKET
    while bucket < length:
        bucket *= 2
    return bucket


def plan_batches(lengths: list[int], *, max_tokens: int) -> list[Batch]:
    """Forward passes for inputs of `lengths`, each at most `max_tokens` padded tokens (an
    input longer than that runs alone)."""
    order = sorted(range(len(lengths)), key=lambda index: lengths[index])
    batches: list[Batch] = []
    rows: list[int] = []
    for index in order:
        length = lengths[index]  # the longest so far: the order is ascending
        fits = (len(rows) + 1) * length <= max_tokens
        if rows and (bucket_of(length) != bucket_of(lengths[rows[0]]) or not fits):
            batches.append(Batch(tuple(rows), lengths[rows[-1]]))
            rows = []
        rows.append(index)
    if rows:
        batches.append(Batch(tuple(rows), lengths[rows[-1]]))
    return batches
