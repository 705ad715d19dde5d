"""Tool calls: forced by grammar so even the small model's call validates."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 12}},
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_required_tool_call_validates_stream_and_not(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", max_tokens=48
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    schema = {WEATHER["function"]["name"]: WEATHER, TIME["function"]["name"]: TIME}[
        call.function.name
    ]["function"]["parameters"]
    jsonschema.validate(json.loads(call.function.arguments), schema)

    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=ASK,
            tools=[WEATHER, TIME],
            tool_choice="required",
            max_tokens=48,
            stream=True,
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [d.index for d in deltas] == [0]
    assert deltas[0].function.name == call.function.name
    assert deltas[0].function.arguments == call.function.arguments
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_named_tool_choice_forces_that_function(client, model):
    reply = client.chat.completions.create(
        model=model,
        messages=ASK,
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=32,
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), TIME["function"]["parameters"])


def test_tool_choice_none_answers_in_text(client, model):
    reply = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=8
    )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content


def test_tool_result_round_trip(client, model):
    reply = client.chat.completions.create(
        model=model,
        messages=[
            *ASK,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
        ],
        tools=[WEATHER],
        max_tokens=12,
    )
    assert reply.choices[0].message.content or reply.choices[0].message.tool_calls


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"tools": "x"}, "tools must be an array"),
        ({"tools": [{"type": "function"}]}, "function.name must be a string"),
        ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice must be"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "unknown function 'nope'",
        ),
        ({"tool_choice": "required"}, "needs at least one tool"),
    ],
)
def test_bad_tool_fields_are_400(client, model, fields, message):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, extra_body=fields)
    assert message in caught.value.body["message"]
