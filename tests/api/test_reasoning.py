"""Reasoning kept apart from the answer, with a template that opens <think>."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import THINKING_MODEL

ASK = [{"role": "user", "content": "Is the sky blue?"}]
# Thinking on (mlx-lm defaults it off for vocabularies without <think> tokens), then a
# short thought, the closing tag and a short answer, forced by grammar.
SHAPE = {
    "reasoning_effort": "high",
    "guided_regex": r"[a-z]{2,6} [a-z]{2,6}</think>[A-Z][a-z]{1,6}",
}


def reasoning_of(message) -> str | None:
    return (message.model_extra or {}).get("reasoning_content")


def test_think_block_goes_to_reasoning_content(client):
    reply = client.chat.completions.create(
        model=THINKING_MODEL, messages=ASK, max_tokens=20, extra_body=SHAPE
    )
    message = reply.choices[0].message
    assert message.content and message.content[0].isupper()
    assert "<think>" not in message.content and "</think>" not in message.content
    thought = reasoning_of(message)
    assert thought and "</think>" not in thought

    chunks = list(
        client.chat.completions.create(
            model=THINKING_MODEL, messages=ASK, max_tokens=20, extra_body=SHAPE, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas) == thought
    assert "".join(d.content or "" for d in deltas) == message.content


def test_reasoning_effort_none_turns_thinking_off(client):
    reply = client.chat.completions.create(
        model=THINKING_MODEL,
        messages=ASK,
        max_tokens=4,
        extra_body={"reasoning_effort": "none", "guided_regex": "[A-Z][a-z]{1,8}"},
    )
    assert reasoning_of(reply.choices[0].message) is None
    assert reply.choices[0].message.content


def test_explicit_template_kwargs_win_over_reasoning_effort(client):
    reply = client.chat.completions.create(
        model=THINKING_MODEL,
        messages=ASK,
        max_tokens=20,
        extra_body={
            **SHAPE,
            "reasoning_effort": "none",
            "chat_template_kwargs": {"enable_thinking": True},
        },
    )
    assert reasoning_of(reply.choices[0].message)


def test_assistant_reasoning_history_is_accepted(client):
    reply = client.chat.completions.create(
        model=THINKING_MODEL,
        messages=[*ASK, {"role": "assistant", "content": "Yes.", "reasoning": "sky is blue"}, *ASK],
        max_tokens=20,
        extra_body=SHAPE,
    )
    assert reasoning_of(reply.choices[0].message)


def test_unknown_reasoning_effort_is_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=THINKING_MODEL, messages=ASK, extra_body={"reasoning_effort": "hihg"}
        )
    assert "'none', 'minimal', 'low', 'medium', 'high', 'xhigh'" in caught.value.body["message"]


def test_a_template_without_think_tags_leaves_them_in_the_text(client, model):
    """The default model's template names no <think>: one in its output is its own text,
    never reasoning (mlx-bun splits only for a think-tag template)."""
    reply = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=32,
        extra_body={"guided_regex": "<think>[a-z]{2,4}</think>[A-Z][a-z]{1,4}"},
    )  # fmt: skip
    message = reply.choices[0].message
    assert message.content.startswith("<think>") and "</think>" in message.content
    assert reasoning_of(message) is None
