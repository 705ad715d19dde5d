"""response_format and the guided_* fields, enforced by grammar on the real model."""

from __future__ import annotations

import asyncio
import json
import re

import jsonschema
import pytest

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "person": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 12},
                    "city": {"type": "string", "maxLength": 12},
                },
                "required": ["name", "city"],
            }
        },
        "required": ["person"],
    },
    "array_bounds": {
        "type": "object",
        "properties": {
            "colors": {
                "type": "array",
                "items": {"type": "string", "maxLength": 8},
                "minItems": 2,
                "maxItems": 3,
            }
        },
        "required": ["colors"],
    },
    "enum": {
        "type": "object",
        "properties": {"mood": {"enum": ["happy", "sad", "calm"]}},
        "required": ["mood"],
    },
    "integer_range": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 18, "maximum": 65},
            "score": {"type": "integer", "minimum": -5, "maximum": 5},
        },
        "required": ["age", "score"],
    },
    "required_fields": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 16},
            "done": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 10},
        },
        "required": ["title", "done"],
    },
}


def test_five_schemas_produce_valid_json_side_by_side(run_async, model):
    async def ask(client, name, schema):
        reply = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Describe something as JSON ({name})."}],
            max_tokens=64,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": True},
            },
        )
        return reply.choices[0]

    async def scenario(client):
        return await asyncio.gather(*(ask(client, n, s) for n, s in SCHEMAS.items()))

    for (name, schema), choice in zip(SCHEMAS.items(), run_async(scenario), strict=True):
        assert choice.finish_reason == "stop", (name, choice.message.content)
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_json_object_mode_and_vllm_alias(client, model):
    ask = [{"role": "user", "content": "Give a tiny JSON object about a cat."}]
    reply = client.chat.completions.create(
        model=model, messages=ask, max_tokens=48, response_format={"type": "json_object"}
    )
    content = reply.choices[0].message.content
    # Free-form JSON may run past max_tokens; what was written is still JSON.
    assert content.startswith("{")
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    schema = SCHEMAS["enum"]
    alias = client.chat.completions.create(
        model=model, messages=ask, max_tokens=16, extra_body={"guided_json": schema}
    )
    jsonschema.validate(json.loads(alias.choices[0].message.content), schema)


def test_regex_and_choice(client, model):
    ask = [{"role": "user", "content": "Give me a phone number."}]
    reply = client.chat.completions.create(
        model=model, messages=ask, max_tokens=12, extra_body={"guided_regex": r"[0-9]{3}-[0-9]{4}"}
    )
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", reply.choices[0].message.content)
    choices = ["red", "green", "blue"]
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Pick a color."}],
        max_tokens=6,
        stream=True,
        extra_body={"guided_choice": choices},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text in choices


def test_grammar_wins_over_schema_by_precedence(client, model):
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Answer."}],
        max_tokens=6,
        response_format={"type": "json_object"},
        extra_body={"guided_grammar": 'root ::= "yes" | "no"', "guided_choice": ["maybe"]},
    )
    assert reply.choices[0].message.content in ("yes", "no")


def test_cut_off_constrained_output_reports_length(client, model):
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Describe a dragon as JSON."}],
        max_tokens=4,
        response_format={"type": "json_object"},
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 4


def test_uncompilable_grammar_degrades_with_a_warning(http, model):
    response = http.post(
        "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": "Say b."}],
            "max_tokens": 3,
            "guided_regex": "(?<=a)b",
        },
    )
    assert response.status_code == 200
    assert "grammar not enforced" in response.headers["warning"]
    assert "Lookbehind" in response.headers["warning"]
    assert response.json()["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": "x"}},
            "json_schema must be an object",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": 5}}},
            "must be a JSON schema object",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format must be an object with type"),
        ({"guided_choice": []}, "guided_choice must be a nonempty list"),
        ({"guided_regex": 7}, "guided_regex must be a nonempty string"),
        ({"guided_json": [1]}, "guided_json must be a JSON schema object"),
    ],
)
def test_plainly_wrong_constraints_are_400(http, model, fields, message):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
