"""Anthropic's Messages API, driven by the official `anthropic` SDK against the live server."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest

from inference.api.anthropic_render import MessageBuilder
from inference.protocol.events import Failed, Finished, ReasoningDelta, TextDelta, ToolCall
from tests.conftest import THINKING_MODEL

PARIS = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
# As in test_reasoning: a short thought, the closing tag and a short answer, by grammar.
# The newest SDK leaves the sampling fields out of its signatures; the API still takes them.
GREEDY = {"temperature": 0}
THOUGHT_THEN_ANSWER = {"guided_regex": r"[a-z]{2,6} [a-z]{2,6}</think>[A-Z][a-z]{1,6}"}


@pytest.fixture(scope="module")
def claude(lab_server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def paris(claude, model) -> anthropic.types.Message:
    """The greedy answer the stream and stop-sequence tests compare against."""
    return claude.messages.create(model=model, messages=PARIS, max_tokens=16, extra_body=GREEDY)


def texts(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_create_answers_with_a_message(paris, model):
    assert paris.type == "message" and paris.role == "assistant"
    assert paris.id.startswith("msg_")
    assert paris.model == model
    assert [block.type for block in paris.content] == ["text"]
    assert "Paris" in paris.content[0].text
    assert paris.stop_reason in ("end_turn", "max_tokens")
    assert paris.stop_sequence is None
    assert 0 < paris.usage.output_tokens <= 16
    assert paris.usage.input_tokens + paris.usage.cache_read_input_tokens > 10


def test_stream_matches_create(claude, model, paris):
    with claude.messages.stream(
        model=model, messages=PARIS, max_tokens=16, extra_body=GREEDY
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == paris.content[0].text
    assert final.content[0].text == streamed
    assert final.id.startswith("msg_") and final.id != paris.id
    assert final.stop_reason == paris.stop_reason
    assert final.usage.output_tokens == paris.usage.output_tokens
    total_input = final.usage.input_tokens + final.usage.cache_read_input_tokens
    assert total_input == paris.usage.input_tokens + paris.usage.cache_read_input_tokens


def test_stream_events_are_framed_as_anthropic_sends_them(http, model):
    body = {"model": model, "messages": PARIS, "max_tokens": 3, "stream": True}
    with http.stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    frames = [frame for frame in raw.split("\n\n") if frame]
    names = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        data = json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        names.append(name)
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    last_delta = json.loads(frames[-2].split("data: ", 1)[1])
    assert last_delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert last_delta["usage"]["output_tokens"] == 3


def test_stop_sequence_cuts_the_text_before_it(claude, model, paris):
    full = paris.content[0].text
    assert "Paris" in full
    reply = claude.messages.create(
        model=model, messages=PARIS, max_tokens=16, extra_body=GREEDY, stop_sequences=["Paris"]
    )
    assert reply.stop_reason == "stop_sequence"
    assert reply.stop_sequence == "Paris"
    assert texts(reply) == full.split("Paris")[0]


def test_max_tokens_stop_reason(claude, model):
    sampled = {"temperature": 0.7, "top_p": 0.9, "top_k": 20}
    reply = claude.messages.create(model=model, messages=PARIS, max_tokens=2, extra_body=sampled)
    assert reply.stop_reason == "max_tokens"
    assert reply.stop_sequence is None
    assert reply.usage.output_tokens == 2


def _valid_weather_call(block) -> None:
    assert block.type == "tool_use"
    assert block.id.startswith("toolu_")
    assert block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER["input_schema"])


def test_tool_choice_any_forces_a_valid_tool_use_stream_and_not(claude, model):
    reply = claude.messages.create(
        model=model,
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        max_tokens=32,
    )
    assert reply.stop_reason == "tool_use"
    (block,) = reply.content
    _valid_weather_call(block)

    partial_json = []
    with claude.messages.stream(
        model=model,
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        max_tokens=32,
    ) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial_json.append(event.delta.partial_json)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (streamed,) = final.content
    _valid_weather_call(streamed)
    assert json.loads("".join(partial_json)) == streamed.input == block.input


def test_tool_result_round_trip(claude, model):
    def conversation(result: str) -> list[dict]:
        call = {"type": "tool_use", "id": "toolu_01", "name": "get_weather"}
        call["input"] = {"city": "Paris", "unit": "celsius"}
        return [
            *ASK_WEATHER,
            {"role": "assistant", "content": [call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": result}],
            },
        ]

    short = claude.messages.count_tokens(
        model=model, messages=conversation("18 degrees"), tools=[WEATHER]
    )
    longer = claude.messages.count_tokens(
        model=model, messages=conversation("18 degrees, sunny, a light breeze"), tools=[WEATHER]
    )
    assert longer.input_tokens > short.input_tokens  # the result reaches the prompt

    reply = claude.messages.create(
        model=model, messages=conversation("18 degrees"), tools=[WEATHER], max_tokens=8
    )
    assert reply.content and reply.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_system_blocks_join_like_a_system_string(claude, model):
    blocks = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Be kind."}]
    as_blocks = claude.messages.count_tokens(model=model, messages=PARIS, system=blocks)
    as_string = claude.messages.count_tokens(
        model=model, messages=PARIS, system="You are terse.\n\nBe kind."
    )
    default = claude.messages.count_tokens(model=model, messages=PARIS)
    assert as_blocks.input_tokens == as_string.input_tokens != default.input_tokens

    reply = claude.messages.create(model=model, messages=PARIS, system=blocks, max_tokens=3)
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == as_blocks.input_tokens


def test_count_tokens_matches_the_prompt_of_create(claude, model, paris):
    counted = claude.messages.count_tokens(model=model, messages=PARIS)
    assert counted.input_tokens == paris.usage.input_tokens + paris.usage.cache_read_input_tokens


def test_thinking_enabled_gives_a_thinking_block_then_text(claude):
    ask = [{"role": "user", "content": "Is the sky blue?"}]
    thinking = {"type": "enabled", "budget_tokens": 1024}
    reply = claude.messages.create(
        model=THINKING_MODEL,
        messages=ask,
        max_tokens=20,
        thinking=thinking,
        extra_body=THOUGHT_THEN_ANSWER,
    )
    assert [block.type for block in reply.content] == ["thinking", "text"]
    thought, answer = reply.content
    assert thought.thinking and "</think>" not in thought.thinking
    assert answer.text[0].isupper() and "<think>" not in answer.text

    with claude.messages.stream(
        model=THINKING_MODEL,
        messages=ask,
        max_tokens=20,
        thinking=thinking,
        extra_body=THOUGHT_THEN_ANSWER,
    ) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == thought.thinking
    assert final.content[1].text == answer.text
    assert deltas[0] == "thinking_delta" and deltas[-1] == "text_delta"

    # Thinking disabled: the template opens no <think> block, so no thinking block.
    reply = claude.messages.create(
        model=THINKING_MODEL,
        messages=ask,
        max_tokens=4,
        thinking={"type": "disabled"},
        extra_body={"guided_regex": "[A-Z][a-z]{1,8}"},
    )
    assert [block.type for block in reply.content] == ["text"]


def test_earlier_thinking_blocks_are_accepted(claude):
    history = [
        {"role": "user", "content": "Is the sky blue?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "sky is blue", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Yes."},
            ],
        },
        {"role": "user", "content": "And the grass?"},
    ]
    counted = claude.messages.count_tokens(model=THINKING_MODEL, messages=history)
    assert counted.input_tokens > 10


def test_output_config_json_schema_constrains_the_answer(claude, model):
    schema = {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    reply = claude.messages.create(
        model=model,
        messages=[{"role": "user", "content": "Is Paris in France?"}],
        max_tokens=16,
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    jsonschema.validate(json.loads(texts(reply)), schema)


# -- errors -----------------------------------------------------------------------------

HI = [{"role": "user", "content": "hi"}]
INVALID = [
    ({"max_tokens": None}, "max_tokens: Field required"),
    ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    ({"max_tokens": "8"}, "max_tokens: Input should be a valid integer"),
    ({"model": None}, "model: Field required"),
    ({"messages": None}, "messages: Field required"),
    ({"messages": "hi"}, "messages: Input should be a valid list"),
    ({"messages": []}, "messages: at least one message is required"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role: Input should be"),
    ({"messages": [{"role": "user"}]}, "messages.0.content: Field required"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content: Input should be"),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "messages.0.content.0.text: Input should be a valid string",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        "messages.0.content.0.source.type: Input should be 'base64' or 'url'",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
        "content blocks of type 'document' are not supported in user messages",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
        "messages.0.content.0.tool_use_id: Input should be a valid string",
    ),
    (
        {"messages": [{"role": "assistant", "content": [{"type": "tool_result"}]}]},
        "'tool_result' are not supported in assistant messages",
    ),
    ({"system": 5}, "system: Input should be a valid string or a list of text blocks"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema: Field required"),
    ({"tools": [{"type": "web_search_20250305", "name": "s"}]}, "tool type 'web_search_20250305'"),
    ({"tool_choice": {"type": "any"}}, "tool_choice of type 'any' needs at least one tool"),
    (
        {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
        "tool_choice.name: tool 'nope' is not among the request's tools",
    ),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type: Input should be"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens: Field required"),
    ({"thinking": {"type": "maybe"}}, "thinking.type: Input should be"),
    ({"stop_sequences": "Paris"}, "stop_sequences: Input should be a valid list"),
    ({"metadata": "x"}, "metadata: Input should be a valid dictionary"),
    ({"temperature": -1}, "temperature must be at least 0"),
    ({"top_p": 2}, "top_p must be at most 1"),
    ({"top_k": -1}, "top_k must be at least 0"),
    ({"stream": "yes"}, "stream must be of type bool"),
]


@pytest.mark.parametrize("fields, message", INVALID, ids=[str(c[0])[:40] for c in INVALID])
def test_invalid_fields_are_anthropic_shaped_400s(http, model, fields, message):
    body = {"model": model, "max_tokens": 4, "messages": HI, **fields}
    body = {key: value for key, value in body.items() if value is not None}
    response = http.post("/v1/messages", json=body)
    assert response.status_code == 400, response.text
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": response.json()["error"]["message"]},
    }
    assert message in response.json()["error"]["message"]


def test_sdk_raises_bad_request_for_a_missing_max_tokens(claude, model):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.post("/v1/messages", body={"model": model, "messages": HI}, cast_to=object)
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert caught.value.body["error"]["message"] == "max_tokens: Field required"


def test_unknown_model_is_a_404_not_found_error(claude):
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="claude-nonexistent", messages=HI, max_tokens=4)
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "not_found_error"
    assert "claude-nonexistent" in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="claude-nonexistent", messages=HI)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_malformed_json_is_a_400(http, path):
    response = http.post(path, content=b'{"model": ', headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "Invalid JSON" in error["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_wrong_method_is_an_anthropic_shaped_405(http, path):
    response = http.get(path)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "GET" in error["error"]["message"]


def test_count_tokens_validates_like_create_but_needs_no_max_tokens(http, model):
    response = http.post("/v1/messages/count_tokens", json={"model": model, "messages": HI})
    assert response.status_code == 200 and response.json()["input_tokens"] > 0
    response = http.post("/v1/messages/count_tokens", json={"model": model, "messages": []})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "messages: at least one message is required"


# -- the builder, event by event (no server) --------------------------------------------


def test_builder_streams_the_blocks_it_returns():
    builder = MessageBuilder(model="m", input_tokens=7)
    events = builder.start()
    for engine_event in [
        ReasoningDelta("hmm"),
        TextDelta("Let me "),
        TextDelta("check."),
        ToolCall(id="call_abc", name="f", arguments='{"x": 1}'),
        Finished("tool_calls", prompt_tokens=7, completion_tokens=9, cached_tokens=3),
    ]:
        events += builder.feed(engine_event)
    message = builder.message()
    assert message["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": ""},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_abc", "name": "f", "input": {"x": 1}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["input_tokens"] == 4
    assert message["usage"]["cache_read_input_tokens"] == 3
    assert [(e["type"], e.get("index")) for e in events] == [
        ("message_start", None),
        ("ping", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert events[9]["content_block"]["input"] == {}
    assert json.loads(events[10]["delta"]["partial_json"]) == {"x": 1}


def test_builder_reports_a_failure_as_an_error_event():
    builder = MessageBuilder(model="m", input_tokens=3)
    builder.start()
    builder.feed(TextDelta("partial"))
    events = builder.feed(Failed("the engine stopped"))
    assert events == [
        {"type": "error", "error": {"type": "api_error", "message": "the engine stopped"}}
    ]
    assert builder.error == "the engine stopped"
