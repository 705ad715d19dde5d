"""Where a chat prompt's reusable prefix ends, found by probing the model's template.

The prompt cache stores a chat's KV state at this boundary during prefill
(caching/prompt_cache.py), so the conversation's next turn finds its prefix. The tail
past it is the generation primer: what the template appends to open the assistant's
turn, which the next turn renders otherwise (or not at all). One fixed primer cannot
say where that is: a template may open the turn with an empty think block when thinking
is off, keep that block for a text reply but drop it before a tool call, or render the
last user turn differently once a reply follows. So, as mlx-bun does, the conversation
is rendered again continued (a reply, then a user turn; with tools, a tool-call reply
too) and the boundary is the end of what every rendering shares with the prompt, at
most one token short of its end.

A template mode's primer length (the template's variables, tools or not) is kept once
known, so a mode is probed once; a "primer" past PRIMER_CAP tokens means the probe
diverged for the content's sake (a template that rewrites earlier turns), and is used
for this prompt only.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable

PRIMER_CAP = 64  # mlx-bun's sanity cap on a primer it remembers
# Modes remembered, the least recently used dropped: a client picks the template's
# variables (chat_template_kwargs), so their number is bounded here, not by the templates.
MAX_MODES = 256
PROBE_TEXT = "x"  # the probe's reply and user turn: only what comes before them is compared


class CacheBoundary:
    """One model's boundary finder over its own render and encode (PromptBuilder's)."""

    def __init__(self, render: Callable[..., str], encode: Callable[[str], list[int]]) -> None:
        """`render(messages, tools=, kwargs=)` raises on a conversation the template refuses."""
        self._render = render
        self._encode = encode
        self._primers: OrderedDict[tuple[str, bool], int] = OrderedDict()  # mode -> primer

    def find(
        self, prompt: list[int], messages: list[dict], tools: list[dict] | None, kwargs: dict
    ) -> int | None:
        """How many of `prompt`'s tokens (rendered from `messages`) a next turn shares;
        None when the probe finds no usable boundary (then nothing is stored early)."""
        mode = (json.dumps(kwargs, sort_keys=True, default=str), bool(tools))
        primer = self._primers.get(mode)
        if primer is None:
            primer = self._probe(prompt, messages, tools, kwargs)
            if primer is None:
                return None
            if primer <= PRIMER_CAP:
                self._remember(mode, primer)
        else:
            self._primers.move_to_end(mode)
        # A prompt the next turn keeps whole (ChatML: its history repeats the assistant
        # header) is stored one token short: the last one is always computed, its logits
        # start the reply, as an exact cache hit recomputes it.
        boundary = len(prompt) - max(primer, 1)
        return boundary if boundary > 0 else None

    def _remember(self, mode: tuple[str, bool], primer: int) -> None:
        self._primers[mode] = primer
        while len(self._primers) > MAX_MODES:
            self._primers.popitem(last=False)

    def _probe(
        self, prompt: list[int], messages: list[dict], tools: list[dict] | None, kwargs: dict
    ) -> int | None:
        """The primer's length: the prompt's tokens past what every continuation keeps."""
        shared = len(prompt)
        for reply in _replies(tools):
            continued = [*messages, reply, {"role": "user", "content": PROBE_TEXT}]
            try:
                probe = self._encode(self._render(continued, tools=tools, kwargs=kwargs))
            except Exception:  # a template that refuses the continuation: no boundary
                return None
            shared = _common_prefix(prompt, probe, shared)
        return len(prompt) - shared


def _replies(tools: list[dict] | None) -> list[dict]:
    """A text reply and, with tools, a call of the first: some templates keep an empty
    think block before text but drop it before a call, and both must keep the boundary."""
    replies = [{"role": "assistant", "content": PROBE_TEXT}]
    if tools:
        name = tools[0]["function"]["name"]
        call = {"id": "cache-boundary-probe", "type": "function",
                "function": {"name": name, "arguments": {}}}  # fmt: skip
        replies.append({"role": "assistant", "content": "", "tool_calls": [call]})
    return replies


def _common_prefix(one: list[int], other: list[int], limit: int) -> int:
    """The length of the prefix `one` and `other` share, at most `limit`."""
    limit = min(limit, len(other))
    for index in range(limit):
        if one[index] != other[index]:
            return index
    return limit
