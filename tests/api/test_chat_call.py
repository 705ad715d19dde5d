"""Every surface parses its body into the one ChatCall: the same turn asked for through
OpenAI chat, Anthropic Messages, the Responses API or the lab's page is the same call."""

from __future__ import annotations

import json

import pytest

from inference.api.anthropic_request import parse_messages_request
from inference.api.openai_request import parse_chat_completion
from inference.api.responses_request import parse_responses_call, responses_chat_call
from inference.errors import ApiError
from lab.chat_settings import chat_call, parse_settings

MODEL = "some-model"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
SAMPLING = {"temperature": 0.3, "top_p": 0.9, "top_k": 5, "seed": 7}


def openai_body() -> dict:
    call = {"id": "c1", "type": "function",
            "function": {"name": "weather", "arguments": json.dumps({"city": "Paris"})}}  # fmt: skip
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "reasoning_effort": "high",
        "stop": ["END"],
        "max_tokens": 20,
        "adapter": "house",
        **SAMPLING,
    }


def anthropic_body() -> dict:
    return {
        "model": MODEL,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Paris"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "Sunny"},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],  # fmt: skip
        "tools": [{"name": "weather", "input_schema": WEATHER}],
        "tool_choice": {"type": "tool", "name": "weather"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stop_sequences": ["END"],
        "max_tokens": 20,
        "adapter": "house",
        **SAMPLING,
    }


def responses_body() -> dict:
    return {
        "model": MODEL,
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "Weather?"},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "weather",
                "arguments": json.dumps({"city": "Paris"}),
            },
            {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
            {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
        ],  # fmt: skip
        "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}],
        "tool_choice": {"type": "function", "name": "weather"},
        "reasoning": {"effort": "high"},
        "stop": ["END"],
        "max_output_tokens": 20,
        "adapter": "house",
        **SAMPLING,
    }


def test_one_turn_through_three_protocols_is_one_call():
    openai = parse_chat_completion(openai_body())
    anthropic = parse_messages_request(anthropic_body())
    responses = responses_chat_call(parse_responses_call(responses_body()), [])
    assert openai == anthropic == responses
    assert openai.tools.choice == "weather" and openai.reasoning_effort == "high"
    assert openai.messages[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert openai.sampling.items() >= SAMPLING.items()
    assert openai.stop == ("END",) and openai.max_tokens == 20


def test_the_lab_page_s_turn_is_the_api_s_call():
    page = parse_settings(
        {
            "model": MODEL,
            "system_prompt": "Be brief.",
            "params": {"temperature": 0.2, "max_tokens": 9, "stop": ["x"], "top_k": ""},
            "thinking": False,
            "structured": {"kind": "regex", "pattern": "[ab]+"},
            "adapter": "house",
        }
    )
    api = parse_chat_completion(
        {
            "model": MODEL,
            "messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "Hi"}],
            "temperature": 0.2, "max_tokens": 9, "stop": ["x"],
            "chat_template_kwargs": {"enable_thinking": False},
            "guided_regex": "[ab]+",
            "adapter": "house",
        }
    )  # fmt: skip
    assert chat_call(page, [{"role": "user", "content": "Hi"}]) == api
    assert api.structured.kind == "regex"


@pytest.mark.parametrize(
    ("parse", "body", "message"),
    [
        (parse_chat_completion, {"messages": [{"role": "user", "content": "Hi"}], "top_p": 2},
         "top_p must be at most 1"),
        (parse_messages_request, {"model": MODEL, "max_tokens": 5, "top_p": 2,
                                  "messages": [{"role": "user", "content": "Hi"}]},
         "top_p must be at most 1"),
        (lambda body: responses_chat_call(parse_responses_call(body), []),
         {"input": "Hi", "top_p": 2}, "top_p must be at most 1"),
        (lambda body: chat_call(parse_settings(body), [{"role": "user", "content": "Hi"}]),
         {"params": {"top_p": 2}}, "top_p must be at most 1"),
    ],
)  # fmt: skip
def test_every_surface_refuses_a_shared_field_with_the_same_words(parse, body, message):
    with pytest.raises(ApiError) as refused:
        parse(body)
    assert refused.value.message == message and refused.value.param == "top_p"


def test_a_responses_error_in_a_content_part_names_the_input_item_it_came_from():
    """The chat path reads the parts, as messages[k]; the client sent input[i]: instructions,
    an earlier response's turns and reasoning items all shift k away from i."""
    body = {"model": "m", "instructions": "Be brief.", "input": [
        {"role": "user", "content": "Hello."},
        {"type": "reasoning", "summary": []},
        {"role": "user", "content": [{"type": "input_text", "text": "See this."},
                                     {"type": "input_image", "image_url": "ftp://host/a.png"}]},
    ]}  # fmt: skip
    earlier = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hi!"}]
    with pytest.raises(ApiError) as caught:
        responses_chat_call(parse_responses_call(body), earlier)
    assert caught.value.param == "input[2].content[1].image_url"
    assert caught.value.message.startswith("input[2].content[1].image_url: an image URL must")
