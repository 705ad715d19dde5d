"""Generated replies' own token ids, standing in for their re-tokenization in later prompts.

A client sends a model's reply back as text in the next turn's messages. Tokenized again,
that text need not give the ids the model generated: a sampled reply may spell a word in
other pieces than BPE's merges would, and the prompt cache, which holds the KV state of
the ids the model produced, then misses from the first difference on. So, as mlx-bun's
token history does, the worker keeps the ids of the replies it generated; where one
appears verbatim in a rendered prompt, its own ids replace its stretch. The rest of the
prompt is tokenized piece by piece between those stretches: the same pieces of text give
the same ids on every turn, so each turn's prompt starts with what the cache holds.

Only text the model produced verbatim is replaced, and only by the ids that decode to
it, so the prompt still says the same text.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

from .output_parser import think_markers

# Replies remembered per worker, the oldest out first: a conversation's earlier turns are
# its most recent replies, and each is matched against every prompt.
CAPACITY = 256
# Shorter replies ("OK") could be found in text the model did not write, and re-tokenizing
# a few characters differently saves nothing worth the risk.
MIN_CHARS = 16


class TokenHistory:
    """One worker's generated replies: recorded by the engine thread, resolved by the
    prompt builder's."""

    def __init__(
        self,
        decode: Callable[[list[int]], str],
        encode: Callable[[str], list[int]],
        end_tokens: Iterable[int] = (),
        think_end: int | None = None,
        capacity: int = CAPACITY,
    ) -> None:
        """`think_end`: the id closing a reasoning block, where templates drop the
        reasoning from earlier turns and keep what follows it."""
        self._decode = decode
        self._encode = encode
        self._end_tokens = frozenset(end_tokens)
        self._think_end = think_end
        self._replies: deque[tuple[int, ...]] = deque(maxlen=capacity)
        self._texts: dict[tuple[int, ...], list[tuple[str, tuple[int, ...]]]] = {}
        self._lock = threading.Lock()

    def record(self, tokens: Iterable[int]) -> None:
        """A finished reply's generated ids (its end-of-turn token dropped)."""
        ids = tuple(tokens)
        while ids and ids[-1] in self._end_tokens:
            ids = ids[:-1]
        if not ids:
            return
        with self._lock:
            if len(self._replies) == self._replies.maxlen:
                self._texts.pop(self._replies[0], None)
            self._replies.append(ids)

    def resolve_prompt(
        self, text: str, tokens: list[int], boundary: int | None
    ) -> tuple[list[int], int | None]:
        """`resolve`, and the prompt's cache boundary moved with its end (the boundary sits
        in the generation primer, after every earlier reply)."""
        resolved = self.resolve(text, tokens)
        if boundary is not None:
            boundary += len(resolved) - len(tokens)
        return resolved, boundary

    def resolve(self, text: str, tokens: list[int]) -> list[int]:
        """`tokens` (`text` tokenized) with each recorded reply found in `text` given its
        own ids, or `tokens` as they are where none is found."""
        with self._lock:
            replies = list(self._replies)
        found = sorted(
            (at, -len(reply), reply, ids)
            for key in replies
            for reply, ids in self._spans(key)
            if (at := text.find(reply)) >= 0
        )
        pieces, out, end = 0, [], 0
        for at, _, reply, ids in found:
            if at < end:
                continue  # overlaps one already placed (a reply quoted in another)
            out.extend(self._encode(text[end:at]))
            out.extend(ids)
            end = at + len(reply)
            pieces += 1
        if not pieces:
            return tokens
        out.extend(self._encode(text[end:]))
        return out

    def _spans(self, key: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
        """A reply's texts a template may render, each with the ids that decode to it: the
        whole reply, and the answer after its reasoning block."""
        spans = self._texts.get(key)
        if spans is None:
            spans = [(self._decode(list(key)), key)]
            if self._think_end is not None and self._think_end in key:
                answer = key[key.index(self._think_end) + 1 :]
                while answer and not self._decode([answer[0]]).strip():
                    answer = answer[1:]  # the newlines templates strip after the block
                spans.append((self._decode(list(answer)), answer))
            spans = [(text, ids) for text, ids in spans if len(text) >= MIN_CHARS]
            with self._lock:
                self._texts[key] = spans
        return spans


def history_for(tokenizer) -> TokenHistory:
    """A model's history over its tokenizer (mlx-lm's TokenizerWrapper)."""
    markers = think_markers(tokenizer)
    close = tokenizer.encode(markers[1], add_special_tokens=False) if markers else []
    return TokenHistory(
        tokenizer.decode,
        lambda text: tokenizer.encode(text, add_special_tokens=False),
        tokenizer.eos_token_ids,
        think_end=close[0] if len(close) == 1 else None,
    )
