"""Token fast-forwarding for tool calls (MLXLAB_FILL, mlx-bun's MLX_BUN_FILL): once the
model opens a tool call, the text its chat template and the tool's schema leave no choice
about is drafted, and verified like any draft (speculative.py).

A call's text is `opener NAME after_name ARGUMENTS closer` (CallShape, read from the
template by prompting/fill_plan.py). What is determined at each point:
- the opener, once a long enough part of the start marker is written;
- the name, as far as the tools that still match agree (all of it once one is left);
- in the arguments (a JSON object): the separators after a key and before the next; a
  key once its prefix names one unused property (and, for a strict schema, the next key
  in the schema's order); the opening quote of a string value; an enum's or const's value
  as far as its values agree; and `}` and the closer once no key can follow.
Echo mode also copies spans of the prompt (prompt lookup) inside an argument's value.

Drafts never change what is generated: a span the model would spell otherwise (another
tokenization, another key order) is refused at its first differing token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from os.path import commonprefix  # of any strings, not only paths

from ...protocol.events import FillUsage
from .drafting import Drafter, DraftPlan

WHITESPACE = " \t\n\r"
# A start marker written this far (at least half of it) is taken as a call opening.
PARTIAL_MARKER_SHARE = 0.5
# Tokens decoded behind the text's end while no call is open: longer than any marker.
MARKER_WINDOW = 16


@dataclass(frozen=True)
class CallShape:
    """How the template writes one call: `opener` (from the start marker to the name),
    `after_name` (to the arguments' object), `closer` (from the object's end through the
    end marker), and the arguments' separators: `colon` between a key's closing quote and
    its value, `comma` between a value and the next key's opening quote."""

    opener: str
    after_name: str
    closer: str
    colon: str = ": "
    comma: str = ", "


@dataclass(frozen=True)
class ToolFill:
    """What one tool's schema determines: its properties, which are required, and for a
    strict schema (all required, no others) their order; per property, the JSON texts its
    value may take (an enum's, a const's) or the start every value shares (`"` for a
    string)."""

    name: str
    properties: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    strict: bool = False
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    starts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FillPlan:
    """A request's fill: `mode` strict or echo; `refused` names why it does not fill
    (logprobs, grammar, draft, media, template), and then nothing else is used."""

    mode: str
    marker: str = ""
    shape: CallShape | None = None
    tools: tuple[ToolFill, ...] = ()
    refused: str = ""


def determined(plan: FillPlan, text: str) -> tuple[str, str]:
    """What must follow `text` (a call's text from its start marker, or part of the
    marker), and where `text` ends: "value" inside an argument's value, "done" past the
    call's closer, else "". ("", ...) when nothing is determined."""
    shape = plan.shape
    if len(text) < len(shape.opener):
        if shape.opener.startswith(text):
            return shape.opener[len(text) :] + _name_rest(plan, ""), ""
        return "", ""
    if not text.startswith(shape.opener):
        return "", ""
    rest = text[len(shape.opener) :]
    named = [tool for tool in plan.tools if rest.startswith(tool.name + shape.after_name)]
    if not named:
        return _name_rest(plan, rest), ""
    tool = max(named, key=lambda each: len(each.name))
    return _arguments(shape, tool, rest[len(tool.name + shape.after_name) :])


def _name_rest(plan: FillPlan, prefix: str) -> str:
    heads = ((tool, tool.name + plan.shape.after_name) for tool in plan.tools)
    matching = [(tool, head) for tool, head in heads if head.startswith(prefix)]
    if len(matching) == 1:
        tool, head = matching[0]
        return head[len(prefix) :] + "{" + _opening(plan.shape, tool, [])
    return commonprefix([head[len(prefix) :] for _, head in matching])


def _arguments(shape: CallShape, tool: ToolFill, text: str) -> tuple[str, str]:
    """The arguments' object so far: scanned to its last structural point (the start, a
    key's opening or closing quote, a value's start or end, the object's end), where the
    text since is compared with what must come next."""
    keys: list[str] = []
    expect, mark = "{" + _opening(shape, tool, keys), 0  # what follows `mark`
    state, i, n = "before", 0, len(text)
    while i < n:
        char = text[i]
        if state == "before":
            if char == "{":
                state = "object"
            elif char not in WHITESPACE:
                return "", ""
        elif state == "object":  # a key's opening quote or the end
            if char == '"':
                end = _string_end(text, i)
                if end is None:
                    return _key_rest(shape, tool, keys, text[i + 1 :]), ""
                keys.append(_key(text[i:end]))
                state, i = "key", end
                expect, mark = shape.colon + _value_start(tool, keys[-1]), end
                continue
            if char == "}":
                expect, mark, state = shape.closer, i + 1, "closed"
            elif char not in WHITESPACE + ",":
                return "", ""
        elif state == "key":  # the separator, then a value
            if char not in WHITESPACE + ":":
                end = _value_end(text, i)
                if end is None:
                    return _value_rest(shape, tool, keys, text[i:]), "value"
                state, i = "value", end
                expect, mark = _after_value(shape, tool, keys), end
                continue
        elif state == "value":
            if char == "}":
                expect, mark, state = shape.closer, i + 1, "closed"
            elif char == ",":
                state = "object"
            elif char not in WHITESPACE:
                return "", ""
        else:  # closed: the closer
            break
        i += 1
    written = text[mark:]
    if state == "closed" and written.startswith(shape.closer):
        return "", "done"
    return (expect[len(written) :] if expect.startswith(written) else ""), ""


def _opening(shape: CallShape, tool: ToolFill, keys: list[str]) -> str:
    """What follows the object's `{` or a value's comma: the next key of a strict schema;
    a key's quote where one is still required; the end where no key is left."""
    left = [key for key in tool.properties if key not in keys]
    if tool.strict and left:
        return f'"{left[0]}"{shape.colon}{_value_start(tool, left[0])}'
    if not left:
        return "}" + shape.closer
    return '"' if any(key not in keys for key in tool.required) else ""


def _after_value(shape: CallShape, tool: ToolFill, keys: list[str]) -> str:
    left = [key for key in tool.properties if key not in keys]
    if not left:
        return "}" + shape.closer
    if tool.strict:
        return shape.comma + _opening(shape, tool, keys)
    if any(key not in keys for key in tool.required):
        return shape.comma + '"'
    return ""


def _key_rest(shape: CallShape, tool: ToolFill, keys: list[str], prefix: str) -> str:
    unused = [key for key in tool.properties if key not in keys and key.startswith(prefix)]
    if len(unused) == 1:
        key = unused[0]
        return key[len(prefix) :] + '"' + shape.colon + _value_start(tool, key)
    return commonprefix([key[len(prefix) :] for key in unused])


def _value_start(tool: ToolFill, key: str) -> str:
    values = tool.values.get(key)
    if values:
        if len(values) == 1:
            return values[0]
        return commonprefix(list(values))
    return tool.starts.get(key, "")


def _value_rest(shape: CallShape, tool: ToolFill, keys: list[str], written: str) -> str:
    values = [value for value in tool.values.get(keys[-1], ()) if value.startswith(written)]
    if len(values) == 1:
        return values[0][len(written) :] + _after_value(shape, tool, keys)
    return commonprefix([value[len(written) :] for value in values])


def _string_end(text: str, start: int) -> int | None:
    """The index after the JSON string opening at `start`, or None if it is still open."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return None


def _value_end(text: str, start: int) -> int | None:
    """The index after the JSON value starting at `start`, or None if it may go on."""
    if text[start] == '"':
        return _string_end(text, start)
    if text[start] in "{[":
        depth, i = 0, start
        while i < len(text):
            char = text[i]
            if char == '"':
                end = _string_end(text, i)
                if end is None:
                    return None
                i = end
                continue
            depth += (char in "{[") - (char in "}]")
            i += 1
            if depth == 0:
                return i
        return None
    i = start
    while i < len(text) and text[i] not in WHITESPACE + ",}]":
        i += 1
    return i if i < len(text) else None  # a number may have more digits to come


def _key(quoted: str) -> str:
    try:
        return json.loads(quoted)
    except ValueError:
        return quoted[1:-1]


class FillDrafter:
    """One row's fill: reads its generated text for an open call, drafts what is
    determined there (or, in echo mode inside a value, what prompt lookup finds)."""

    fast_forward = False  # a grammar's forced tokens are ForcedDrafter's

    def __init__(
        self,
        plan: FillPlan,
        *,
        prompt_length: int,
        decode: Callable[[list[int]], str],
        encode: Callable[[str], list[int]],
    ) -> None:
        self.plan = plan
        self.start = prompt_length
        self.decode, self.encode = decode, encode
        self.echo = Drafter(DraftPlan()) if plan.mode == "echo" else None
        self.scan = 0  # generated tokens before this hold no open call
        self.proposed = self.accepted = 0
        self.disarmed = False
        self._source = ""  # "fill" or "echo": what the last proposal was

    def propose(self, history: list[int], limit: int) -> list[int]:
        self._source = ""
        if self.disarmed or limit <= 0:
            return []
        generated = history[self.start :]
        text = self._call_text(generated)
        if text is None:
            return []
        rest, where = determined(self.plan, text)
        if where == "done":
            self.scan = len(generated)
            return []
        if rest:
            self._source = "fill"
            return self.encode(rest)[:limit]
        if where == "value" and self.echo is not None:
            tokens = self.echo.propose(history, limit)
            self._source = "echo" if tokens else ""
            return tokens
        return []

    def observe(self, proposed: int, accepted: int) -> None:
        self.proposed += proposed
        self.accepted += accepted
        if self._source == "echo":
            self.echo.observe(proposed, accepted)

    def disarm(self) -> None:
        """The tool-call parser failed on this row's output: no more fill for it."""
        self.disarmed = True

    @property
    def rejected(self) -> int:
        return self.proposed - self.accepted

    def usage(self, filled: int) -> FillUsage:
        """`filled`: the filled tokens in the completion (a stop may cut some off)."""
        return FillUsage(
            mode=self.plan.mode,
            filled_tokens=filled,
            proposed_tokens=self.proposed,
            parse_fallback=self.disarmed,
        )

    def _call_text(self, generated: list[int]) -> str | None:
        """The open call's text from its start marker, or a marker's start at the end."""
        text = self.decode(generated[self.scan :])
        marker = self.plan.marker
        at = text.rfind(marker)
        if at >= 0:
            return text[at:]
        shortest = max(1, int(len(marker) * PARTIAL_MARKER_SHARE))
        for size in range(min(len(marker) - 1, len(text)), shortest - 1, -1):
            if marker.startswith(text[-size:]):
                return text[-size:]
        self.scan = max(self.scan, len(generated) - MARKER_WINDOW)
        return None
