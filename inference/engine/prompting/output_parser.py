"""Reading the model's text as content, reasoning and tool calls.

Written once on the event stream, for every protocol: `<think>` blocks become
reasoning, tool-call markup becomes ToolCall events, and no markup ever
reaches the content.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from mlx_lm.generate import TextStateMachine
from mlx_lm.tool_parsers import json_tools

from ...protocol.events import Event, ReasoningDelta, TextDelta, TokenLogprob, ToolCall

DEFAULT_THINK = ("<think>", "</think>")
DEFAULT_TOOL_MARKERS = (json_tools.tool_call_start, json_tools.tool_call_end)


def think_markers(tokenizer) -> tuple[str, str] | None:
    """The reasoning markers of a model whose chat template uses them, else None.

    mlx-lm's declared ones (TokenizerWrapper.think_start/_end, from the vocabulary), or
    `<think>` blocks. A template that names neither marker has no reasoning channel: a
    literal "<think>" in its model's output is text, not reasoning (mlx-bun splits only
    for a think-tag template). A template written in Python (mlx-lm's chat_template_type)
    has no source to read: the vocabulary decides.
    """
    markers = (tokenizer.think_start, tokenizer.think_end) if tokenizer.has_thinking else None
    source = template_source(tokenizer)
    if source is None:
        return markers
    markers = markers or DEFAULT_THINK
    return markers if any(marker in source for marker in markers) else None


def template_source(tokenizer) -> str | None:
    """The Jinja source of the model's chat template(s), or None without one."""
    source = getattr(tokenizer, "chat_template", None)
    if isinstance(source, dict):  # named templates (transformers): any of them counts
        source = "\n".join(value for value in source.values() if isinstance(value, str))
    return source if isinstance(source, str) and source else None


def tool_sentinels(tokenizer) -> tuple[int, int] | None:
    """The token ids of a tool call's markers when the model declares each as one token
    (mlx-lm's TokenizerWrapper.tool_call_start_tokens/_end_tokens); else None, and tool
    calls are found in the decoded text. With sentinels only those ids open and close a
    call, as in mlx-bun: the same characters spelled by other tokens are text."""
    if not tokenizer.has_tool_calling:
        return None
    start, end = tokenizer.tool_call_start_tokens, tokenizer.tool_call_end_tokens
    if not start or not end or len(start) != 1 or len(end) != 1 or start == end:
        return None
    return start[0], end[0]


@dataclass(frozen=True)
class OutputFormat:
    """How to read one request's output."""

    think: tuple[str, str] | None = DEFAULT_THINK
    starts_in_reasoning: bool = False  # the prompt ended inside an open <think>
    tool_markers: tuple[str, str] | None = None
    tool_sentinels: tuple[int, int] | None = None  # (open, close) token ids: tool_sentinels()
    tool_parser: Callable = json_tools.parse_tool_call
    tools: list[dict] | None = None
    tool_names: frozenset[str] = frozenset()
    forced_tool_call: bool = False  # the whole output is one call, by grammar
    extra: dict = field(default_factory=dict)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _transitions(output: OutputFormat) -> dict:
    transitions: dict[str, list] = {"normal": [], "reasoning": [], "tool": []}
    if output.think:
        start, end = output.think
        transitions["normal"].append((start, "reasoning"))
        transitions["reasoning"].append((end, "normal"))
    text_markers = output.tool_markers and output.tool_sentinels is None
    if text_markers and output.tool_names and not output.forced_tool_call:
        start, end = output.tool_markers
        transitions["normal"].append((start, "tool"))
        transitions["tool"].append((end, "normal"))
    return transitions


class OutputParser:
    """Splits released text into events; call `finish` once at the end."""

    def __init__(
        self,
        output: OutputFormat,
        emit: Callable[[Event], None],
        *,
        on_fallback: Callable[[], None] | None = None,
    ) -> None:
        """`on_fallback`: called when a call's text did not parse, and went out as text."""
        self._output = output
        self._emit = emit
        self._on_fallback = on_fallback
        initial = "reasoning" if output.starts_in_reasoning else "normal"
        if output.forced_tool_call:
            initial = "tool"
        self._machine = TextStateMachine(_transitions(output))
        self._state = self._machine.make_state(initial=initial)
        self._current = initial
        self._tool_text = ""
        self._maybe_bare_call = ""  # a leading "{" may be a call without markup
        self._content_started = False
        self.tool_calls = 0

    def feed(self, text: str, logprobs: list[TokenLogprob]) -> None:
        self._state, segments = TextStateMachine.split(self._state, text)
        self._route(segments, logprobs)

    def takes_sentinel(self, token: int) -> bool:
        """Whether `token` opens or closes a tool call here (OutputFormat.tool_sentinels);
        a stray one (a close outside a call, an open inside one or in reasoning) is text."""
        sentinels = self._output.tool_sentinels
        if sentinels is None or token not in sentinels or not self._output.tool_names:
            return False
        opens = token == sentinels[0]
        return opens != (self._current == "tool") and self._current != "reasoning"

    def sentinel(self, token: int) -> None:
        """Open or close a call at a sentinel token (takes_sentinel), in place of its text."""
        opens = token == self._output.tool_sentinels[0]
        self._state, rest, _ = TextStateMachine.flush(self._state)
        self._route([(self._state[0], rest)], [])
        self._state = self._machine.make_state(initial="tool" if opens else "normal")
        self._route([(self._state[0], "")], [])

    def finish(self) -> None:
        self._state, rest, _ = TextStateMachine.flush(self._state)
        self._route([(self._state[0], rest)], [])
        if self._current == "tool" and self._tool_text:
            self._end_tool()
        if self._maybe_bare_call:
            held, self._maybe_bare_call = self._maybe_bare_call, ""
            if not self._call_from(held):
                self._emit(TextDelta(held))

    def _route(self, segments: list[tuple[str, str]], logprobs: list[TokenLogprob]) -> None:
        for state, text in segments:
            if self._current == "tool" and state != "tool":
                self._end_tool()
            self._current = state
            if not text:
                continue
            if state == "reasoning":
                self._emit(ReasoningDelta(text))
            elif state == "tool":
                self._tool_text += text
            else:
                self._content(text, logprobs)
                logprobs = []

    def _content(self, text: str, logprobs: list[TokenLogprob]) -> None:
        if self._maybe_bare_call or (
            not self._content_started and self._output.tool_names and text.lstrip().startswith("{")
        ):
            self._maybe_bare_call += text
            return
        if not self._content_started and not text.strip() and self._output.tool_names:
            return  # leading whitespace before a possible call: decide later
        self._content_started = True
        self._emit(TextDelta(text, logprobs))

    def _end_tool(self) -> None:
        text, self._tool_text = self._tool_text, ""
        if not self._call_from(text):
            self._emit(TextDelta(text))
            if self._on_fallback is not None:
                self._on_fallback()

    def _call_from(self, text: str) -> bool:
        """Emit the call(s) in `text`; False when it is not a call to a known tool."""
        try:
            parsed = self._output.tool_parser(text, self._output.tools)
        except (ValueError, TypeError, KeyError):
            return False
        calls = parsed if isinstance(parsed, list) else [parsed]
        if not calls or not all(
            isinstance(c, dict) and c.get("name") in self._output.tool_names for c in calls
        ):
            return False
        for call in calls:
            arguments = call.get("arguments", call.get("parameters", {}))
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            self._emit(
                ToolCall(id=call.get("id") or new_call_id(), name=call["name"], arguments=arguments)
            )
            self.tool_calls += 1
        return True
