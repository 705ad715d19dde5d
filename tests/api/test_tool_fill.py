"""Token fast-forwarding for tool calls (MLXLAB_FILL=strict) through the official SDKs:
a server of its own fills, the session's server (fill off) does not, and both answer a
few-shot agent with the same call. `usage.fill` on chat completions (streamed too),
Anthropic Messages and Responses; its refusals."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.conftest import DEFAULT_MODEL, server_home, start_daphne
from tests.tool_agent import TIME, WEATHER, agent


@pytest.fixture(scope="module")
def filling(tmp_path_factory, model_folder, redis_url):
    home = tmp_path_factory.mktemp("fill")
    server = start_daphne(home, server_home(home, model_folder, FILL="strict"), "fill-daphne")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def filled(filling) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{filling.url}/v1", api_key="unused", max_retries=0)


def ask(client: openai.OpenAI, city: str = "Paris", **fields):
    return client.chat.completions.create(
        model=DEFAULT_MODEL, messages=agent(city), tools=[WEATHER, TIME], max_tokens=48,
        temperature=0, **fields,
    )  # fmt: skip


def calls(reply) -> list[tuple[str, dict]]:
    tool_calls = reply.choices[0].message.tool_calls or []
    return [(call.function.name, json.loads(call.function.arguments)) for call in tool_calls]


def fill_of(reply) -> dict | None:
    return reply.model_dump()["usage"].get("fill")


def test_a_filled_call_is_the_call_the_model_makes_unfilled(client, filled):
    plain, fast = ask(client), ask(filled)
    assert calls(fast) == calls(plain) == [("get_weather", {"city": "Paris", "unit": "fahrenheit"})]
    assert fast.choices[0].finish_reason == "tool_calls"
    assert fast.usage.completion_tokens == plain.usage.completion_tokens
    assert fill_of(plain) is None  # the session's server: fill off
    fill = fill_of(fast)
    assert fill["mode"] == "strict" and fill["parse_fallback"] is False
    assert fast.usage.completion_tokens > fill["filled_tokens"] >= 15
    assert "refused" not in fill


def test_a_streamed_call_carries_fill_in_its_usage(filled):
    stream = ask(filled, "Oslo", stream=True, stream_options={"include_usage": True})
    arguments, usage = "", None
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                arguments += call.function.arguments or ""
        usage = chunk.usage or usage
    assert json.loads(arguments)["city"] == "Oslo"
    assert usage.model_dump()["fill"]["filled_tokens"] >= 15


def test_anthropic_messages_and_responses_report_fill(filling, filled):
    claude = anthropic.Anthropic(base_url=filling.url, api_key="unused", max_retries=0)
    system, *messages = agent("Lima")
    tools = [
        {"name": tool["function"]["name"], "input_schema": tool["function"]["parameters"]}
        for tool in (WEATHER, TIME)
    ]
    message = claude.messages.create(
        model=DEFAULT_MODEL, system=system["content"], messages=messages, tools=tools,
        max_tokens=48, extra_body={"temperature": 0},
    )  # fmt: skip
    assert [block.type for block in message.content] == ["tool_use"]
    assert message.content[0].name == "get_weather" and message.stop_reason == "tool_use"
    assert message.usage.model_dump()["fill"]["filled_tokens"] >= 15
    response = filled.responses.create(
        model=DEFAULT_MODEL, input=agent("Lima"), max_output_tokens=48, temperature=0,
        store=False,
        tools=[{"type": "function", **tool["function"]} for tool in (WEATHER, TIME)],
    )  # fmt: skip
    assert [item.type for item in response.output] == ["function_call"]
    assert json.loads(response.output[0].arguments) == message.content[0].input
    assert response.usage.model_dump()["fill"]["filled_tokens"] >= 15


def test_what_fill_refuses_it_says_in_usage(filled):
    assert fill_of(ask(filled, logprobs=True))["refused"] == "logprobs"
    forced = ask(filled, tool_choice="required")  # the grammar's forced tokens instead
    assert fill_of(forced)["refused"] == "grammar" and calls(forced)
    assert fill_of(forced)["filled_tokens"] == 0
    untooled = filled.chat.completions.create(
        model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert fill_of(untooled) is None  # no tools offered: nothing to fill
