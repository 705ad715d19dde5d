"""Each named session's last finished turn, kept apart from the prompt cache's LRU.

A request may name a session (prompt_cache.py): its finished sequence replaces the
session's last turn here, where other traffic cannot evict it, only older sessions past
the count bound, or past the byte bound when more than one is kept.
"""

from __future__ import annotations

import copy
from collections import OrderedDict

from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache


class SessionTurns:
    """Session key -> that session's last turn (its tokens and KV cache); the least recently
    used session goes first. The caller holds its lock around every call."""

    def __init__(self) -> None:
        self._turns: OrderedDict[tuple, tuple[list[int], list, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._turns)

    @property
    def nbytes(self) -> int:
        return sum(size for _, _, size in self._turns.values())

    def keep(self, key: tuple, tokens: list[int], cache: list, *, most: int, max_bytes: int):
        """`tokens` and `cache` as the session's last turn, the oldest sessions dropped past
        `most` sessions, or past `max_bytes` together while more than one is kept."""
        self._turns.pop(key, None)
        self._turns[key] = (list(tokens), cache, sum(c.nbytes for c in cache))
        while len(self._turns) > most or (len(self._turns) > 1 and self.nbytes > max_bytes):
            self._turns.popitem(last=False)

    def prefix(self, key: tuple, prompt: list[int]) -> tuple[list | None, int]:
        """A copy of the session's last turn trimmed to what it shares with `prompt`, and
        how many tokens that is; (None, 0) where it shares none or cannot be trimmed."""
        if key not in self._turns:
            return None, 0
        self._turns.move_to_end(key)
        tokens, cache, _ = self._turns[key]
        shared = 0
        for kept, token in zip(tokens, prompt, strict=False):
            if kept != token:
                break
            shared += 1
        usable = min(shared, len(prompt) - 1)  # the last token is computed for its logits
        if usable <= 0 or (usable < len(tokens) and not can_trim_prompt_cache(cache)):
            return None, 0
        kept = copy.deepcopy(cache)
        if usable < len(tokens):
            trim_prompt_cache(kept, len(tokens) - usable)
        return kept, usable

    def clear(self) -> None:
        self._turns.clear()
