"""Drafts from a draft model: a smaller (or more quantized) model with the target's vocabulary,
loaded inside the target's worker process, beside its weights.

The draft model proposes its greedy continuation; the verifying batch (speculative.py)
checks it like any fixed draft, so the output stays the target's own: greedy rows give the
same tokens, and sampled rows draw from the target's distribution (a fixed draft `d` is
kept with probability p(d), else the token comes from p without d: the standard
accept/resample rule for a draft distribution that is all on `d`). Drafting greedily rather
than sampling keeps a seeded row's draws exactly those it makes without drafts.

Each row keeps its own KV cache of the draft model. mlx-lm's `speculative_generate_step`
drafts the same way for one sequence; here the row's cache catches up on whatever the row
kept (its history) and drops what the target refused, before each proposal.

Threads: tokenizers load on the worker's main thread (prompt building checks the
vocabulary there, so a mismatch is a 400 before the request is accepted); weights load and
run on the engine thread, the one that owns MLX.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_tokenizer

from ..acceleration.loader import load_model
from .drafting import common_prefix

# Drafts a step when the request names no num_draft_tokens: mlx_lm.server's default.
DEFAULT_MODEL_DRAFT_TOKENS = 3
PREFILL_STEP = 512  # prompt tokens a draft model's forward pass takes at once


def vocabulary(tokenizer) -> dict[str, int]:
    """The token -> id map, added tokens included."""
    wrapped = getattr(tokenizer, "_tokenizer", tokenizer)
    return dict(wrapped.get_vocab())


def vocabulary_hash(vocab: dict[str, int]) -> str:
    text = json.dumps(sorted(vocab.items()), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class DraftModels:
    """The draft models of one worker, loaded once each and kept by folder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vocabularies: dict[str, dict[str, int]] = {}
        self._models: dict[str, object] = {}

    def vocabulary(self, path: str) -> dict[str, int]:
        """The draft's vocabulary, from its tokenizer alone (no weights, no MLX)."""
        with self._lock:
            if path not in self._vocabularies:
                self._vocabularies[path] = vocabulary(load_tokenizer(Path(path)))
            return self._vocabularies[path]

    def model(self, path: str):
        """The draft's model (loaded on first use, on the engine thread)."""
        with self._lock:
            if path not in self._models:
                self._models[path] = load_model(path).model
            return self._models[path]

    @property
    def loaded(self) -> list[str]:
        return sorted(self._models)


class ModelDrafter:
    """One row's drafts from a draft model, with the draft model's own KV cache."""

    def __init__(self, model, limit: int | None = None) -> None:
        self.model = model
        self.limit = limit or DEFAULT_MODEL_DRAFT_TOKENS
        self.cache = make_prompt_cache(model)
        self.fed: list[int] = []  # the tokens the cache holds, in order
        self.proposed = 0
        self.accepted = 0

    def propose(self, history: list[int], limit: int) -> list[int]:
        """The draft model's greedy continuation of `history` (the prompt, the text so far
        and the token about to be fed), up to `limit` tokens."""
        limit = min(limit, self.limit)
        if limit <= 0:
            return []
        logits = self._catch_up(history)
        drafts = []
        for _ in range(limit):
            token = mx.argmax(logits[:, -1, :], axis=-1)
            drafts.append(token)
            if len(drafts) < limit:
                logits = self.model(token[None], cache=self.cache)
        tokens = mx.concatenate(drafts).tolist()
        self.fed = [*history, *tokens[:-1]]
        return tokens

    def _catch_up(self, history: list[int]) -> mx.array:
        """Trim the cache to what it shares with `history`, feed the rest; the logits
        after the last token of `history`."""
        common = common_prefix(self.fed, history)
        common = min(common, len(history) - 1)  # the last token is fed again for its logits
        if len(self.fed) > common:
            for layer in self.cache:
                layer.trim(len(self.fed) - common)
        rest = history[common:]
        while len(rest) > PREFILL_STEP:
            self.model(mx.array(rest[:PREFILL_STEP])[None], cache=self.cache)
            mx.eval([layer.state for layer in self.cache])
            rest = rest[PREFILL_STEP:]
        return self.model(mx.array(rest)[None], cache=self.cache)

    def observe(self, proposed: int, accepted: int) -> None:
        self.proposed += proposed
        self.accepted += accepted

    @property
    def rejected(self) -> int:
        return self.proposed - self.accepted
