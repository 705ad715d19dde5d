"""OpenAI /v1/responses with the official SDK: chains, streaming, storage, restarts."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.conftest import start_daphne

CAPITAL = "What is the capital of France? Answer in one sentence."


def test_create_retrieve_and_input_items(client, model):
    reply = client.responses.create(model=model, input=CAPITAL, max_output_tokens=16, temperature=0)
    assert reply.status == "completed" and reply.id.startswith("resp_")
    assert "Paris" in reply.output_text
    assert reply.output[0].type == "message" and reply.output[0].role == "assistant"
    assert reply.usage.input_tokens > 10 and reply.usage.output_tokens > 0
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    again = client.responses.retrieve(reply.id)
    assert again.output_text == reply.output_text and again.id == reply.id
    items = client.responses.input_items.list(reply.id).data
    assert len(items) == 1 and items[0].role == "user"


def same_as_chat(client, model, turns: list[tuple[str, str]], question: str, max_tokens: int):
    """The answer /v1/chat/completions gives to the explicit conversation (greedy)."""
    messages = []
    for asked, answered in turns:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    messages.append({"role": "user", "content": question})
    return client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)


def test_three_turn_chain_by_previous_response_id(client, model):
    questions = [
        "My name is Alice. What is the capital of France?",
        "And of Italy?",
        "What is my name?",
    ]
    first = client.responses.create(model=model, input=questions[0], max_output_tokens=12)
    second = client.responses.create(
        model=model, input=questions[1], previous_response_id=first.id, max_output_tokens=12
    )
    third = client.responses.create(
        model=model, input=questions[2], previous_response_id=second.id, max_output_tokens=12
    )
    assert third.previous_response_id == second.id
    # The chain is exactly the explicit conversation: same prompt, same greedy answer.
    turns = [(questions[0], first.output_text), (questions[1], second.output_text)]
    chat = same_as_chat(client, model, turns, questions[2], 12)
    assert third.usage.input_tokens == chat.usage.prompt_tokens
    assert third.output_text == chat.choices[0].message.content
    assert first.usage.input_tokens < second.usage.input_tokens < third.usage.input_tokens


def test_streaming_events_and_sequence_numbers(client, model):
    whole = client.responses.create(model=model, input=CAPITAL, max_output_tokens=16)
    with client.responses.stream(model=model, input=CAPITAL, max_output_tokens=16) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    for expected in (
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert expected in types
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == final.output_text
    assert client.responses.retrieve(final.id).output_text == text  # stored when it ended


def test_cut_off_response_is_incomplete(client, model):
    reply = client.responses.create(model=model, input="Write a long story.", max_output_tokens=3)
    assert reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"


def test_function_call_and_its_output(client, model):
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
        },
    }
    reply = client.responses.create(
        model=model,
        input="What is the weather in Paris?",
        tools=[tool],
        tool_choice="required",
        max_output_tokens=32,
    )
    (call,) = [item for item in reply.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), tool["parameters"])
    follow = client.responses.create(
        model=model,
        previous_response_id=reply.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}],
        tools=[tool],
        max_output_tokens=12,
    )
    assert follow.status in ("completed", "incomplete")
    assert follow.output


def test_text_format_json_schema(client, model):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
    }
    reply = client.responses.create(
        model=model,
        input="Name a city as JSON.",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema}},
        max_output_tokens=24,
    )
    jsonschema.validate(json.loads(reply.output_text), schema)


def test_store_false_is_not_kept_and_delete_removes(client, model):
    ephemeral = client.responses.create(model=model, input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ephemeral.id)
    kept = client.responses.create(model=model, input="Hi", max_output_tokens=2)
    client.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(kept.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(kept.id)


@pytest.mark.parametrize(
    "fields, status, message",
    [
        ({"input": 5}, 400, "input must be a string or array"),
        ({"input": "x", "previous_response_id": 7}, 400, "previous_response_id must be a string"),
        ({"input": "x", "previous_response_id": "resp_missing"}, 404, "resp_missing"),
        ({"input": [{"type": "image_generation_call"}]}, 400, "unsupported item type"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "only function tools"),
    ],
)
def test_validation_before_lookup(http, model, fields, status, message):
    response = http.post("/v1/responses", json={"model": model, **fields})
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


def test_a_chain_continues_after_a_restart(lab_server, client, model, tmp_path):
    first = client.responses.create(
        model=model, input="My name is Bob. Say hello.", max_output_tokens=8
    )
    restarted = start_daphne(tmp_path, lab_server.env, label="restarted")
    try:
        fresh = openai.OpenAI(base_url=f"{restarted.url}/v1", api_key="unused", max_retries=0)
        second = fresh.responses.create(
            model=model,
            input="What is my name?",
            previous_response_id=first.id,
            max_output_tokens=10,
        )
    finally:
        restarted.stop()
    chat = same_as_chat(
        client, model, [("My name is Bob. Say hello.", first.output_text)], "What is my name?", 10
    )
    assert second.output_text == chat.choices[0].message.content
    assert second.usage.input_tokens == chat.usage.prompt_tokens
