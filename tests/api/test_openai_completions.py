"""Text completions through the official openai SDK."""

from __future__ import annotations

import openai
import pytest


def test_text_completion(client, model):
    reply = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4)
    assert "Paris" in reply.choices[0].text
    assert reply.id.startswith("cmpl-") and reply.object == "text_completion"
    assert reply.usage.prompt_tokens == 5 and reply.usage.completion_tokens == 4
    assert reply.choices[0].finish_reason == "length"


def test_text_completion_stream_and_logprobs(client, model):
    whole = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4,
        extra_body={"logprobs": True, "top_logprobs": 2},
    )  # fmt: skip
    logprobs = whole.choices[0].logprobs
    assert "".join(logprobs.tokens) == whole.choices[0].text
    assert len(logprobs.token_logprobs) == 4 and all(lp <= 0 for lp in logprobs.token_logprobs)
    assert all(len(top) == 2 for top in logprobs.top_logprobs)
    assert logprobs.text_offset[0] == 0
    chunks = list(
        client.completions.create(
            model=model, prompt="The capital of France is", max_tokens=4, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_token_array_prompt_is_refused(client, model):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=model, prompt=[1, 2, 3], max_tokens=4)
    assert "token-array prompts are not accepted" in caught.value.body["message"]
