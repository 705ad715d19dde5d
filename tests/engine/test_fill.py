"""Token fast-forwarding for tool calls (drafts/fill.py, prompting/fill_plan.py): what a
call's shape and a tool's schema determine, the shape read from a template, and on the
default model: a few-shot agent's tool calls filled, batched beside unfilled rows, with
exactly the tokens it generates unfilled."""

from __future__ import annotations

import pytest

from inference.engine.drafts.fill import CallShape, FillPlan, determined
from inference.engine.prompting.fill_plan import call_shape, tool_fill
from inference.engine.prompting.prompt import PromptBuilder, PromptLimits
from inference.protocol.sampling import SamplingParams
from inference.protocol.wire import ChatInput, GenerateCall
from tests.engine.helpers import generate, submit
from tests.tool_agent import TIME, WEATHER, agent

SHAPE = CallShape('<tool_call>{"name": "', '", "arguments": ', "}</tool_call>")
PLAN = FillPlan("strict", "<tool_call>", SHAPE, (tool_fill(WEATHER), tool_fill(TIME)))
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}'


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ("<tool_", 'call>{"name": "get_'),  # the marker, then as far as both names agree
        ('<tool_call>{"name": "get_w', 'eather", "arguments": {"city": "'),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Os', ""),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"', ', "unit": "'),
        (CALL[: CALL.index("celsius") + 1], 'elsius"}}</tool_call>'),  # one enum value left
        (CALL, "</tool_call>"),
        ('<tool_call>{"name": "get_t', 'ime", "arguments": {"'),  # a required key comes
        ('<tool_call>{"name": "get_time", "arguments": {"c', 'ity": "'),
        ('<tool_call>{"name": "get_time", "arguments": {"city": "Oslo"', ""),  # zone, or "}"
        ('<tool_call>{"name": "get_time", "arguments": {"city": "Oslo", "z', 'one": "'),
        ('<tool_call>{"name": "get_time", "arguments": {"zone": "X", "city": "Y"', "}}</tool_call>"),
        ('<tool_call>{"name": "get_weather", "arguments": {"town', ""),  # no such key
        ('<tool_call>{"name": "lookup', ""),  # no such tool
        ("<tool_call>\n{", ""),  # another shape than the template's
        ("Sure. <", ""),  # too little of a marker
    ],
)  # fmt: skip
def test_what_a_call_s_shape_and_its_tool_s_schema_determine(text, rest):
    inside_a_value = text.endswith(('"Os', '"unit": "c'))
    assert determined(PLAN, text) == (rest, "value" if inside_a_value else "")


def test_a_closed_call_is_done_and_values_are_where_echo_copies():
    assert determined(PLAN, CALL + "</tool_call>")[1] == "done"
    number = FillPlan("echo", "<tool_call>", SHAPE, (tool_fill({"function": {"name": "f"}}),))
    assert determined(number, '<tool_call>{"name": "f", "arguments": {"n": 12')[1] == "value"
    # A nested value is skipped whole, strings with braces in them included.
    text = '<tool_call>{"name": "get_time", "arguments": {"city": {"a": "}{"}, "zone": "Z"'
    assert determined(PLAN, text) == ("}}</tool_call>", "")


def test_the_shape_is_read_from_a_template_s_own_rendering_of_a_call():
    """A Hermes-style template (Qwen2.5's), which writes calls as JSON between markers."""

    def render(messages, tools=None):
        text = "".join(f"<|{m['role']}|>{m['content']}" for m in messages)
        if tools:
            text = f"<|system|>tools: {tools}" + text
        for message in messages:
            for call in message.get("tool_calls", ()):
                function = call["function"]
                arguments = str(function["arguments"]).replace("'", '"')
                text += f'<tool_call>\n{{"name": "{function["name"]}", "arguments": {arguments}}}\n</tool_call>'
        return text

    shape = call_shape(render, ("<tool_call>", "</tool_call>"))
    assert shape == CallShape(
        '<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>", ": ", ", "
    )
    # A template that ignores tools gets the format tools_instruction asks for.
    ignoring = call_shape(lambda messages, tools=None: "x", ("<tool_call>", "</tool_call>"))
    assert ignoring == SHAPE
    assert call_shape(lambda messages, tools=None: str(tools), ("<a>", "</a>")) is None


def _request(engine, mode: str, messages: list[dict], **fields):
    builder = PromptBuilder(engine.loaded, limits=PromptLimits(fill=mode))
    names = ["get_weather", "get_time"]
    chat = ChatInput(messages=messages, tools=[WEATHER, TIME], tool_names=names, tool_choice="auto")
    call = GenerateCall(
        chat=chat, max_tokens=48, sampling=SamplingParams(temperature=0.0), **fields
    )
    return builder.build(call).request


def test_filled_calls_are_the_model_s_own_batched_beside_other_rows(engine):
    asks = [agent("Paris"), agent("Oslo"), [{"role": "user", "content": "Name a colour."}]]
    plain = [generate(engine, _request(engine, "off", messages)) for messages in asks]
    assert [call.name for call in plain[0].calls] == ["get_weather"]
    assert [run.end.fill for run in plain] == [None] * 3
    for mode in ("strict", "echo"):
        runs = [submit(engine, _request(engine, mode, messages)) for messages in asks]
        for run, alone in zip(runs, plain, strict=True):
            run.wait()
            assert (run.text, run.end.finish_reason) == (alone.text, alone.end.finish_reason)
            assert _calls(run) == _calls(alone)
            assert run.end.completion_tokens == alone.end.completion_tokens
        first = runs[0].end.fill
        assert first.mode == mode and first.refused is None and not first.parse_fallback
        # Most of a call is its markup, the name and the schema's keys and enum values.
        assert first.filled_tokens >= runs[0].end.completion_tokens // 2
        assert first.proposed_tokens >= first.filled_tokens
        assert runs[2].end.fill.filled_tokens == 0  # no call opened: nothing drafted
        assert runs[0].end.accepted_prediction_tokens == 0 and not runs[0].end.speculative


def _calls(run) -> list[tuple[str, str]]:
    return [(call.name, call.arguments) for call in run.calls]


def test_refusals_and_a_call_that_does_not_parse(engine):
    logprobs = generate(engine, _request(engine, "strict", agent("Lima"), logprobs=True))
    assert logprobs.end.fill.refused == "logprobs" and logprobs.end.fill.filled_tokens == 0
    drafted = generate(engine, _request(engine, "strict", agent("Lima"), draft_model="ngram"))
    assert drafted.end.fill.refused == "draft" and drafted.end.speculative
    # A call to a tool the request does not offer (the model invents one) goes out as
    # text, and disarms fill.
    messages = [
        {"role": "system", "content": "Always answer with a tool call."},
        {"role": "user", "content": "Find the song Yesterday."},
        {"role": "assistant", "content": '<tool_call>{"name": "lookup", "arguments": {"q": "Yesterday"}}</tool_call>'},
        {"role": "user", "content": "Find the song Help."},
    ]  # fmt: skip
    stray = generate(engine, _request(engine, "strict", messages))
    assert stray.text.startswith('{"name": "') and not stray.calls  # its markup dropped
    assert stray.end.fill.parse_fallback and stray.end.finish_reason == "stop"
    assert stray.text == generate(engine, _request(engine, "off", messages)).text
