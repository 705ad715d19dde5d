"""Rate limits and budgets on the live server through the official SDKs: the headers they
read, the 429s they raise, their retries succeeding once the window passes (3 s here);
the usage record after streamed and whole answers."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest

from tests.conftest import DEFAULT_MODEL

CHAT = [{"role": "user", "content": "Hi"}]


def openai_client(server, key: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=retries)


def anthropic_client(server, key: str, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=retries)


def test_rpm_2_refuses_the_third_request_and_the_sdk_retry_then_succeeds(secured_server):
    key = secured_server.keys["rpm2"]
    chat = openai_client(secured_server, key).chat.completions
    first = chat.with_raw_response.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    chat.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        chat.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    answer = refused.value.response
    assert answer.status_code == 429 and 1 <= int(answer.headers["retry-after"]) <= 3
    assert refused.value.body["type"] == "requests"
    assert refused.value.body["code"] == "rate_limit_exceeded"
    started = time.monotonic()
    patient = openai_client(secured_server, key, retries=5).chat.completions
    reply = patient.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    assert reply.usage.completion_tokens == 1
    assert time.monotonic() - started >= 0.5  # it waited for the window, as told


def test_anthropic_sees_its_own_headers_and_error_then_retries(secured_server):
    key = secured_server.keys["rpm1"]
    messages = anthropic_client(secured_server, key).messages
    first = messages.with_raw_response.create(model=DEFAULT_MODEL, max_tokens=1, messages=CHAT)
    assert first.headers["anthropic-ratelimit-requests-limit"] == "1"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert first.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    with pytest.raises(anthropic.RateLimitError) as refused:
        messages.create(model=DEFAULT_MODEL, max_tokens=1, messages=CHAT)
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "rate_limit_error"
    patient = anthropic_client(secured_server, key, retries=5).messages
    assert patient.create(model=DEFAULT_MODEL, max_tokens=1, messages=CHAT).usage.output_tokens


def test_tokens_per_minute_refuse_once_spent(secured_server):
    chat = openai_client(secured_server, secured_server.keys["tpm"]).chat.completions
    first = chat.with_raw_response.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    assert first.headers["x-ratelimit-limit-tokens"] == "5"
    assert first.parse().usage.total_tokens > 5  # one request may overdraw the window
    deadline = time.monotonic() + 2  # its tokens are spent once its tally is recorded
    with pytest.raises(openai.RateLimitError) as refused:
        while time.monotonic() < deadline:
            chat.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    assert refused.value.body["type"] == "tokens"
    assert refused.value.response.headers["x-ratelimit-remaining-tokens"] == "0"


def test_a_spent_budget_is_refused_on_both_surfaces(secured_server):
    key = secured_server.keys["budget"]
    openai_client(secured_server, key).chat.completions.create(
        model=DEFAULT_MODEL, messages=CHAT, max_tokens=1
    )
    deadline = time.monotonic() + 3
    with pytest.raises(openai.RateLimitError) as refused:
        while time.monotonic() < deadline:
            openai_client(secured_server, key).models.list()
    assert refused.value.body["code"] == "insufficient_quota"
    with pytest.raises(anthropic.RateLimitError) as claude:
        anthropic_client(secured_server, key).messages.create(
            model=DEFAULT_MODEL, max_tokens=1, messages=CHAT
        )
    assert claude.value.body["error"]["type"] == "rate_limit_error"
    assert "monthly token budget" in claude.value.body["error"]["message"]


def test_usage_rows_after_streamed_and_whole_answers(secured_server):
    key = secured_server.keys["usage"]
    chat = openai_client(secured_server, key).chat.completions
    whole = chat.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=2)
    streamed = list(
        chat.create(
            model=DEFAULT_MODEL, messages=CHAT, max_tokens=2, stream=True,
            stream_options={"include_usage": True},
        )
    )[-1]  # fmt: skip
    claude = anthropic_client(secured_server, key).messages.create(
        model=DEFAULT_MODEL, max_tokens=1, messages=CHAT
    )
    # Anthropic's input_tokens leaves out the prompt-cache reads; the record counts them all.
    claude_prompt = claude.usage.input_tokens + (claude.usage.cache_read_input_tokens or 0)
    prompt = whole.usage.prompt_tokens + streamed.usage.prompt_tokens + claude_prompt
    completion = (
        whole.usage.completion_tokens
        + streamed.usage.completion_tokens
        + claude.usage.output_tokens
    )
    headers = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + 5
    while True:
        usage = httpx.get(f"{secured_server.url}/api/usage?group_by=model", headers=headers).json()
        if usage["totals"]["requests"] == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert usage["scope"] == "mine"
    assert usage["data"] == [
        {"group": DEFAULT_MODEL, "label": DEFAULT_MODEL, "requests": 3,
         "prompt_tokens": prompt, "completion_tokens": completion,
         "cached_tokens": usage["data"][0]["cached_tokens"],
         "total_tokens": prompt + completion},
    ]  # fmt: skip
