"""Content, reasoning and tool calls split from text, whatever the chunking."""

from __future__ import annotations

import json

import pytest

from inference.engine.prompting.output_parser import (
    DEFAULT_TOOL_MARKERS,
    OutputFormat,
    OutputParser,
)
from inference.protocol.events import ReasoningDelta, TextDelta, ToolCall

TOOLS = OutputFormat(tool_markers=DEFAULT_TOOL_MARKERS, tool_names=frozenset({"get_weather"}))


def parse(output: OutputFormat, text: str, piece: int) -> list:
    events = []
    parser = OutputParser(output, events.append)
    for start in range(0, len(text), piece):
        parser.feed(text[start : start + piece], [])
    parser.finish()
    return events


def joined(events, kind) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 100])
def test_think_block_is_reasoning_never_content(piece):
    events = parse(OutputFormat(), "<think>plan it</think>The answer.", piece)
    assert joined(events, ReasoningDelta) == "plan it"
    assert joined(events, TextDelta) == "The answer."


@pytest.mark.parametrize("piece", [1, 4, 100])
def test_prompt_that_opened_think_starts_in_reasoning(piece):
    events = parse(OutputFormat(starts_in_reasoning=True), "hmm</think>Yes", piece)
    assert joined(events, ReasoningDelta) == "hmm"
    assert joined(events, TextDelta) == "Yes"


@pytest.mark.parametrize("piece", [1, 5, 100])
def test_marked_tool_call_is_parsed_and_no_markup_leaks(piece):
    text = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    events = parse(TOOLS, text, piece)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert joined(events, TextDelta) == "Let me check. "
    assert calls[0].id.startswith("call_")


def test_bare_json_call_naming_a_known_function():
    events = parse(TOOLS, ' {"name": "get_weather", "arguments": {"city": "Rome"}}', 3)
    assert [e.name for e in events if isinstance(e, ToolCall)] == ["get_weather"]
    assert joined(events, TextDelta) == ""


def test_json_that_is_not_a_call_stays_content():
    text = '{"city": "Rome"}'
    events = parse(TOOLS, text, 4)
    assert joined(events, TextDelta) == text
    assert not any(isinstance(e, ToolCall) for e in events)


def test_unknown_function_in_markup_is_returned_as_text():
    text = '<tool_call>{"name": "launch", "arguments": {}}</tool_call>'
    events = parse(TOOLS, text, 5)
    assert not any(isinstance(e, ToolCall) for e in events)
    assert "launch" in joined(events, TextDelta)


def test_forced_call_reads_the_whole_output():
    forced = OutputFormat(tool_names=frozenset({"get_weather"}), forced_tool_call=True)
    events = parse(forced, '{"name": "get_weather", "arguments": {"city": "Oslo"}}', 6)
    assert [json.loads(e.arguments) for e in events if isinstance(e, ToolCall)] == [
        {"city": "Oslo"}
    ]


def test_without_tools_braces_are_plain_content():
    events = parse(OutputFormat(), '{"a": 1}', 2)
    assert joined(events, TextDelta) == '{"a": 1}'
