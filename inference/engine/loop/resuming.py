"""The runner's side of resumable generation (checkpoints.py): which sequence writes a
key's checkpoint, when, and what an interrupted one leaves for its retry.

Only the engine thread calls it. One sequence checkpoints a key at a time: an identical
one beside it (a retry that reached the batch before its first attempt's cancel) takes
over when that one leaves, rewriting the file with its own tokens.
"""

from __future__ import annotations

from ..caching.checkpoints import CheckpointStore
from .sequence import Sequence


class Resuming:
    """Without a store (checkpoints off), no sequence ever checkpoints."""

    def __init__(self, store: CheckpointStore | None, every: int) -> None:
        self.store = store
        self.every = every
        self._writers: dict[str, Sequence] = {}  # key -> the sequence checkpointing it

    def claim(self, sequence: Sequence) -> None:
        resume = sequence.request.resume
        if self.store is not None and resume is not None and resume.key not in self._writers:
            self._writers[resume.key] = sequence
            sequence.checkpointing = True

    def save(self, sequence: Sequence, *, due: bool = False) -> None:
        """Write what `sequence` generated; when `due`, only every N tokens."""
        if not sequence.checkpointing:
            return
        if due and len(sequence.tokens) - sequence.saved < self.every:
            return
        sequence.saved = self.store.save(sequence.request.resume, sequence.tokens, sequence.saved)

    def finished(self, sequence: Sequence) -> None:
        if sequence.checkpointing:
            self.store.finish(sequence.request.resume)

    def released(self, sequence: Sequence, others) -> None:
        """`sequence` left the batch; an identical one among `others` takes over its key."""
        if not sequence.checkpointing:
            return
        key = sequence.request.resume.key
        del self._writers[key]
        for other in others:
            if other.request.resume is not None and other.request.resume.key == key:
                other.saved = 0
                self.claim(other)
                return
