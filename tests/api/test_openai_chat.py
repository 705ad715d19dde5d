"""Chat completions through the official openai SDK against a live Daphne."""

from __future__ import annotations

import asyncio

import pytest

CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def test_models_lists_the_default_model(client, model):
    models = client.models.list()
    assert model in [m.id for m in models.data]
    assert client.models.retrieve(model).id == model


def test_chat_completion_answers_with_openai_fields(client, model):
    reply = client.chat.completions.create(model=model, messages=CAPITAL, max_tokens=16)
    assert "Paris" in reply.choices[0].message.content
    assert reply.id.startswith("chatcmpl-")
    assert reply.object == "chat.completion"
    assert reply.model == model
    assert reply.created > 0 and reply.system_fingerprint
    assert reply.choices[0].finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage.prompt_tokens > 10 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # Earlier requests may have left the template's default system prompt in the prompt cache.
    assert 0 <= usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens


def test_streaming_matches_the_whole_answer(client, model):
    whole = client.chat.completions.create(model=model, messages=CAPITAL, max_tokens=10)
    stream = client.chat.completions.create(
        model=model,
        messages=CAPITAL,
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == [whole.choices[0].finish_reason]
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    )
    assert all(c.id == chunks[0].id and c.object == "chat.completion.chunk" for c in chunks)


def test_developer_role_and_content_parts(client, model):
    plain = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "Answer briefly."}, *CAPITAL],
        max_tokens=8,
    )
    parts = client.chat.completions.create(
        model=model,
        messages=[
            {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
            {"role": "user", "content": [{"type": "text", "text": CAPITAL[0]["content"]}]},
        ],
        max_tokens=8,
    )
    assert parts.choices[0].message.content == plain.choices[0].message.content
    assert parts.usage.prompt_tokens == plain.usage.prompt_tokens


def test_assistant_tool_call_arguments_are_parsed(client, model):
    reply = client.chat.completions.create(
        model=model,
        messages=[
            *CAPITAL,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Paris"},
        ],
        max_tokens=4,
    )
    assert reply.usage.completion_tokens > 0


def test_max_completion_tokens_wins_over_max_tokens(client, model):
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        max_tokens=12,
        max_completion_tokens=3,
    )
    assert reply.usage.completion_tokens == 3
    assert reply.choices[0].finish_reason == "length"


def test_stop_sequence_is_never_streamed(client, model):
    story = [{"role": "user", "content": "Write a long story about a dragon."}]
    full = client.chat.completions.create(model=model, messages=story, max_tokens=16)
    text = full.choices[0].message.content
    stop = text[5:9]  # inside the answer, most likely across a token boundary
    stream = client.chat.completions.create(
        model=model, messages=story, max_tokens=16, stop=[stop, "zzzz"], stream=True
    )
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text[: text.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_logprobs_shape(client, model):
    reply = client.chat.completions.create(
        model=model, messages=CAPITAL, max_tokens=6, logprobs=True, top_logprobs=3
    )
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert "".join(entry.token for entry in content) == reply.choices[0].message.content
    for entry in content:
        assert entry.logprob <= 0
        assert entry.bytes == list(entry.token.encode())
        tops = [top.logprob for top in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the top token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)


def test_seeded_request_is_reproducible_even_when_batched(run_async, model):
    async def scenario(async_client):
        seeded = dict(
            model=model,
            messages=[{"role": "user", "content": "Invent a name for a dog."}],
            max_tokens=8,
            temperature=1.0,
            seed=7,
        )
        alone = await async_client.chat.completions.create(**seeded)
        noise = dict(seeded, seed=None, messages=[{"role": "user", "content": "Tell a joke."}])
        together = await asyncio.gather(
            async_client.chat.completions.create(**noise),
            async_client.chat.completions.create(**seeded),
            async_client.chat.completions.create(**noise),
        )
        return alone.choices[0].message.content, together[1].choices[0].message.content

    alone, batched = run_async(scenario)
    assert batched == alone


def test_six_concurrent_greedy_requests_equal_each_alone(run_async, model):
    questions = [
        "Name a fruit.",
        "What is 2 plus 2?",
        "Say hello in French.",
        "Name a color.",
        "What is the capital of Italy?",
        "Name a planet.",
    ]

    async def ask(async_client, question):
        reply = await async_client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], max_tokens=8
        )
        return reply.choices[0].message.content

    async def scenario(async_client):
        alone = [await ask(async_client, q) for q in questions]
        together = await asyncio.gather(*(ask(async_client, q) for q in questions))
        return alone, list(together)

    alone, together = run_async(scenario)
    assert together == alone
