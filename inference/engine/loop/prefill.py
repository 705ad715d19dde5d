"""The rows still prefilling their prompts, chunk by chunk, side by side.

Each call computes up to `step_size` tokens of every row's current segment in one forward,
right-padded to the widest piece; the caches then roll that padding to the left of each
row (kv/rows.py), so the rows stay aligned at one index. A chunk never crosses a segment's
end: the prompt cache stores the KV state at a boundary (a conversation's prefix) while
the row is there. A prompt's last token is left for the forward that samples its first
token (decoding.py's `join`), as a decode step computes it.
"""

from __future__ import annotations

import mlx.core as mx

from ..media.rows import prefill_inputs
from . import batch_caches
from .rows import PromptProgress, Row


class Prefilling:
    """The rows being prefilled and their merged caches."""

    def __init__(self, model, step_size: int) -> None:
        self.model = model
        self.step_size = step_size
        self.rows: list[Row] = []
        self.caches: list = []

    def __len__(self) -> int:
        return len(self.rows)

    def admit(self, rows: list[Row]) -> None:
        """Rows from the queue, with the caches they start from (empty, or a cached prefix)."""
        caches = batch_caches.merged([row.cache for row in rows])
        for row in rows:
            row.cache = None
        self.rows += rows
        self.caches = batch_caches.extended(self.caches, caches)

    def chunk(self) -> list[PromptProgress]:
        """One forward over the next piece of every row (none is down to its last token:
        those joined the decoding rows first)."""
        if not self.rows:
            return []
        pieces: list[list[int]] = []
        starts = [len(row.tokens) for row in self.rows]
        progress = [self._take_piece(row, pieces) for row in self.rows]
        self._forward(pieces, self.caches, prefill_inputs(self.model, self.rows, starts, pieces))
        return progress

    def _take_piece(self, row: Row, pieces: list[list[int]]) -> PromptProgress:
        segment = row.segments[0]
        piece = segment[: self.step_size]
        row.segments[0] = segment[len(piece) :]
        ended = not row.segments[0]
        if ended:
            row.segments.pop(0)
        row.tokens += piece
        row.prefilled += len(piece)
        pieces.append(piece)
        return PromptProgress(row.uid, (row.prefilled, row.total), ended, False)

    def _forward(self, pieces: list[list[int]], caches: list, extra: dict) -> None:
        """`extra`: media rows' embeddings and positions (media/rows.py), where any."""
        lengths = [len(piece) for piece in pieces]
        width = max(lengths)
        padding = [width - length for length in lengths]
        if any(padding):
            inputs = mx.array(
                [piece + [0] * pad for piece, pad in zip(pieces, padding, strict=True)]
            )
            for cache in caches:
                cache.prepare(lengths=lengths, right_padding=padding)
        else:
            inputs = mx.array(pieces)
        self.model(inputs, cache=caches, **extra)
        mx.eval([cache.state for cache in caches])
        if any(padding):
            for cache in caches:
                cache.finalize()
            mx.eval([cache.state for cache in caches])
        mx.clear_cache()

    def take_ready(self) -> tuple[list[Row], list, list[int]]:
        """Split off the rows down to their last token: (rows, caches, last tokens)."""
        ready = [i for i, row in enumerate(self.rows) if row.ready]
        if not ready:
            return [], [], []
        rows = [self.rows[i] for i in ready]
        if len(ready) == len(self.rows):  # a lone prompt, or prompts prefilled together
            caches, self.rows, self.caches = self.caches, [], []
        else:
            rest = [i for i in range(len(self.rows)) if i not in ready]
            caches, self.caches = batch_caches.split(self.caches, ready, rest)
            self.rows = [self.rows[i] for i in rest]
        last = []
        for row in rows:
            last.append(row.segments.pop()[0])
            row.prefilled += 1
            row.media = None  # its prompt's embeddings are in its cache now
        return rows, caches, last

    def remove(self, uids: set[int]) -> None:
        keep = [i for i, row in enumerate(self.rows) if row.uid not in uids]
        if len(keep) < len(self.rows):
            self.caches = batch_caches.filtered(self.caches, keep)
            self.rows = [self.rows[i] for i in keep]

    def extract(self, i: int) -> list:
        return batch_caches.extract(self.caches, i)
