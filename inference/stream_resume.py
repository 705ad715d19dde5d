"""A stream whose replica was killed, continued on another of its model's replicas.

The other replica's attempt finds the killed one's checkpoint (on the replicas' shared
disk), replays what it holds and generates the rest: the text the interrupted attempt was
producing, since a resumed generation samples on the checkpoint's seed (greedy needs
none). What the client was already sent is skipped. Should the new text differ from it
(no checkpoint, and a sample drawn afresh), the stream ends as an interrupted stream does:
never with text that contradicts what was shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from .protocol.events import Event, ReasoningDelta, TextDelta, ToolCall


class Diverged(Exception):
    """The new attempt's output is not a continuation of what the client was sent."""


class Sent:
    """What a stream has delivered so far: its text, its reasoning, its tool calls."""

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.tool_calls = 0

    def record(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
        elif isinstance(event, ReasoningDelta):
            self.reasoning += event.text
        elif isinstance(event, ToolCall):
            self.tool_calls += 1


async def beyond(events: AsyncIterator[Event], sent: Sent) -> AsyncIterator[Event]:
    """`events` (a new attempt's, from its start) with what `sent` holds cut off."""
    text, reasoning, calls = sent.text, sent.reasoning, sent.tool_calls
    async with contextlib.aclosing(events):  # closed early: the new attempt is cancelled
        async for event in _beyond(events, text, reasoning, calls):
            yield event


async def _beyond(events, text: str, reasoning: str, calls: int) -> AsyncIterator[Event]:
    async for event in events:
        if isinstance(event, TextDelta) and text:
            rest, text = _cut(event.text, text)
            if rest:
                yield TextDelta(rest)  # its logprobs: a resumed stream has none (serve.py)
        elif isinstance(event, ReasoningDelta) and reasoning:
            rest, reasoning = _cut(event.text, reasoning)
            if rest:
                yield ReasoningDelta(rest)
        elif isinstance(event, ToolCall) and calls:
            calls -= 1
        elif _behind(event, text, reasoning, calls):
            raise Diverged("the new attempt ended or moved on before what was sent")
        else:
            yield event


def _cut(new: str, expected: str) -> tuple[str, str]:
    """`new` past what is `expected` of it, and what is left expected."""
    shared = min(len(new), len(expected))
    if new[:shared] != expected[:shared]:
        raise Diverged("the new attempt's text differs from what was sent")
    return new[shared:], expected[shared:]


def _behind(event: Event, text: str, reasoning: str, calls: int) -> bool:
    """Whether `event` comes while the new attempt has not yet given back all that was
    sent: reasoning goes before the answer, a call after the text before it, and all of it
    before the end."""
    if isinstance(event, TextDelta):
        return bool(reasoning or calls)
    if isinstance(event, ToolCall):
        return bool(reasoning or text)
    return bool(text or reasoning or calls)
