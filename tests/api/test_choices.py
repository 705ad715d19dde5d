"""OpenAI's `n`: several choices from one prompt, each with its own index, on both
completion surfaces, whole and streamed."""

from __future__ import annotations

from collections import defaultdict

HI = [{"role": "user", "content": "Name a colour."}]


def test_n_chat_choices(client, model):
    reply = client.chat.completions.create(
        model=model, messages=HI, n=3, max_tokens=4, temperature=1.0
    )
    assert [choice.index for choice in reply.choices] == [0, 1, 2]
    assert all(choice.message.content for choice in reply.choices)
    assert all(choice.finish_reason in ("stop", "length") for choice in reply.choices)
    single = client.chat.completions.create(model=model, messages=HI, max_tokens=4)
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens  # one prompt
    assert 3 <= reply.usage.completion_tokens <= 12  # every choice's tokens


def test_n_streamed_chat_choices(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=HI,
        n=2,
        max_tokens=4,
        temperature=1.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, reasons, usages = defaultdict(str), {}, []
    for chunk in stream:
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                reasons[choice.index] = choice.finish_reason
    assert set(texts) == set(reasons) == {0, 1}
    assert all(texts.values())
    assert len(usages) == 1 and 2 <= usages[0].completion_tokens <= 8


def test_n_text_completions(client, model):
    reply = client.completions.create(
        model=model, prompt="The sky is", n=2, max_tokens=3, temperature=1.0
    )
    assert [choice.index for choice in reply.choices] == [0, 1]
    assert all(choice.text for choice in reply.choices)
