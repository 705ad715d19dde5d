"""Images in chat messages, through the official `openai` and `anthropic` SDKs (chat
completions, Responses, Messages), on the session's live server and real model workers:
a tiny random-weight Qwen2.5-VL, SmolVLM, Gemma 3 and Qwen3-VL (tests/vision_models.py)
served through mlx-vlm, and the default model, which takes text only.

The models are registered by tests/vision_fixtures.py's `vision_model`, `smolvlm_model`,
`gemma3_model` and `qwen3_vl_model`; each one's worker loads on its first request beside
the default model's.
"""

from __future__ import annotations

import base64

import anthropic
import openai
import pytest

from tests.conftest import DEFAULT_MODEL
from tests.vision_models import png

QUESTION = "What is in this picture?"


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_message(url: str, words: str = QUESTION) -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": words},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }


def ask(client, model: str, messages: list[dict], **options):
    return client.chat.completions.create(
        model=model, messages=messages, max_tokens=4, temperature=0, **options
    )


def test_the_registry_lists_what_each_model_takes(http, staff_http, vision_model):
    listed = {m["id"]: m["capabilities"] for m in http.get("/v1/models").json()["data"]}
    assert listed[vision_model] == ["chat", "vision"]
    assert listed[DEFAULT_MODEL] == ["chat"]
    assert http.get(f"/v1/models/{vision_model}").json()["capabilities"] == ["chat", "vision"]
    registry = staff_http.get("/api/models").json()["results"]
    assert {m["name"]: m["capabilities"] for m in registry}[vision_model] == ["chat", "vision"]


def test_the_sdk_sends_an_image_and_a_second_turn_reuses_its_prefill(client, vision_model):
    url = data_url(png(112, 84, seed=11))
    first = ask(client, vision_model, [image_message(url)])
    assert first.choices[0].finish_reason == "length"
    # 12 placeholders stand for the image: a 112x84 picture in 28-pixel merged patches.
    assert first.usage.prompt_tokens > 12
    history = [
        image_message(url),
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And its colour?"},
    ]
    second = ask(client, vision_model, history)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1


def test_another_image_is_another_prompt(client, vision_model):
    one, other = (image_message(data_url(png(56, 56, seed=seed))) for seed in (12, 13))
    answers = [ask(client, vision_model, [message], logprobs=True) for message in (one, other, one)]
    assert len({answer.usage.prompt_tokens for answer in answers}) == 1
    cached = [answer.usage.prompt_tokens_details.cached_tokens for answer in answers]
    # The same picture again is all cached but the last token; another one is cached up to
    # where it starts, not through its 4 placeholders (a 56x56 picture's).
    assert cached[2] == answers[0].usage.prompt_tokens - 1
    assert cached[1] + 4 < cached[2]
    logprobs = [[c.logprob for c in answer.choices[0].logprobs.content] for answer in answers]
    assert logprobs[0] == logprobs[2] != logprobs[1]


def test_the_sdk_sends_an_image_to_a_second_family(client, http, smolvlm_model):
    """SmolVLM (Idefics3): plain RoPE, the image cut in 512-pixel tiles, each of 64
    placeholders between tokens of their own (a wide picture: four tiles and a global one)."""
    listed = {m["id"]: m["capabilities"] for m in http.get("/v1/models").json()["data"]}
    assert listed[smolvlm_model] == ["chat", "vision"]
    one, other = (image_message(data_url(png(112, 28, seed=seed))) for seed in (16, 17))
    answers = [ask(client, smolvlm_model, [m], logprobs=True) for m in (one, other, one)]
    assert answers[0].usage.prompt_tokens > 5 * 64
    assert answers[0].choices[0].finish_reason == "length"
    cached = [answer.usage.prompt_tokens_details.cached_tokens for answer in answers]
    assert cached[2] == answers[0].usage.prompt_tokens - 1  # the same picture: all of it
    assert cached[1] + 64 < cached[2]  # another: up to its first placeholder
    logprobs = [[c.logprob for c in answer.choices[0].logprobs.content] for answer in answers]
    assert logprobs[0] == logprobs[2] != logprobs[1]


# Families whose tests above do not cover: the fixture that registers each, and what a
# 112x84 picture costs it in placeholders. Gemma 3 resizes it to its square (the tiny
# model's: 16 soft tokens, between its own start and end tokens; sliding-window layers past
# them); Qwen3-VL scales it up to 65,536 pixels, 70 placeholders whose deepstack features
# its first layers add.
MORE_FAMILIES = {"gemma3": ("gemma3_model", 16), "qwen3_vl": ("qwen3_vl_model", 70)}


@pytest.mark.parametrize("family", list(MORE_FAMILIES))
def test_the_sdk_sends_an_image_to_another_family(request, client, http, family):
    fixture, placeholders = MORE_FAMILIES[family]
    model = request.getfixturevalue(fixture)
    assert http.get(f"/v1/models/{model}").json()["capabilities"] == ["chat", "vision"]
    one, other = (image_message(data_url(png(112, 84, seed=seed))) for seed in (18, 19))
    answers = [ask(client, model, [m], logprobs=True) for m in (one, other, one)]
    assert answers[0].usage.prompt_tokens > placeholders
    assert answers[0].choices[0].finish_reason == "length"
    cached = [answer.usage.prompt_tokens_details.cached_tokens for answer in answers]
    assert cached[2] == answers[0].usage.prompt_tokens - 1  # the same picture: all of it
    assert cached[1] + placeholders < cached[2]  # another: up to its first placeholder
    logprobs = [[c.logprob for c in answer.choices[0].logprobs.content] for answer in answers]
    assert logprobs[0] == logprobs[2] != logprobs[1]
    # A second turn about the picture: its first turn, the image among it, from the cache.
    history = [
        one,
        {"role": "assistant", "content": answers[0].choices[0].message.content},
        {"role": "user", "content": "And its colour?"},
    ]
    second = ask(client, model, history)
    assert second.usage.prompt_tokens_details.cached_tokens >= answers[0].usage.prompt_tokens - 1


@pytest.fixture(scope="module")
def claude(lab_server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)


def image_block(data: bytes) -> dict:
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(data).decode()}
    return {"type": "image", "source": source}


def test_the_anthropic_sdk_sends_an_image_block(claude, client, vision_model):
    data = png(112, 84, seed=14)
    message = claude.messages.create(
        model=vision_model,
        max_tokens=4,
        messages=[
            {"role": "user", "content": [image_block(data), {"type": "text", "text": QUESTION}]}
        ],
        extra_body={"temperature": 0},
    )
    # The same picture and words through chat completions: the same prompt, the same reply.
    same = ask(
        client,
        vision_model,
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(data)}},
                                      {"type": "text", "text": QUESTION}]}],
    )  # fmt: skip
    # Anthropic counts the cached part of the input apart.
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == same.usage.prompt_tokens
    assert message.content[0].text == same.choices[0].message.content


def test_the_responses_api_takes_an_input_image(client, vision_model):
    data = png(112, 84, seed=15)
    content = [{"type": "input_text", "text": QUESTION},
               {"type": "input_image", "image_url": data_url(data)}]  # fmt: skip
    first = client.responses.create(
        model=vision_model, input=[{"role": "user", "content": content}],
        max_output_tokens=4, temperature=0,
    )  # fmt: skip
    # The same picture and words through chat completions: the same prompt, the same reply.
    same = ask(client, vision_model, [image_message(data_url(data))])
    assert first.usage.input_tokens == same.usage.prompt_tokens
    assert first.output_text == same.choices[0].message.content
    # The next turn of the chain carries the stored image: its prompt is cached through it.
    second = client.responses.create(
        model=vision_model, input="And its colour?", previous_response_id=first.id,
        max_output_tokens=4, temperature=0,
    )  # fmt: skip
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1


def test_a_text_only_model_refuses_an_image_on_every_surface(client, claude):
    refusal = f"model '{DEFAULT_MODEL}' does not accept image input"
    data = png(56, 56, seed=1)
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, DEFAULT_MODEL, [image_message(data_url(data))])
    assert caught.value.body["message"] == refusal
    assert caught.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=DEFAULT_MODEL,
            input=[
                {"role": "user", "content": [{"type": "input_image", "image_url": data_url(data)}]}
            ],
        )
    assert caught.value.body["message"] == refusal
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model=DEFAULT_MODEL, max_tokens=4,
            messages=[{"role": "user", "content": [image_block(data)]}],
        )  # fmt: skip
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": refusal},
    }


def test_audio_is_refused_by_models_without_an_audio_tower(client, vision_model):
    from tests.audio_models import wav

    clip = base64.b64encode(wav(0.25)).decode()
    audio = {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}}
    for model in (DEFAULT_MODEL, vision_model):
        with pytest.raises(openai.BadRequestError) as caught:
            ask(client, model, [{"role": "user", "content": [audio]}])
        assert caught.value.body["message"] == f"model '{model}' does not accept audio input"


@pytest.mark.parametrize(
    "url, message",
    [
        ("ftp://example.com/cat.png", "an image URL must be an http(s) URL or a data: URL"),
        ("data:image/png;base64,%%%", "is not valid base64"),
        (data_url(b"plain text, no picture"), "is not an image of a supported type"),
        (data_url(png(8, 8, seed=1), "image/tiff"), "images of type 'image/tiff' are not"),
        (data_url(png(8, 8, seed=1)[:40]), "image cannot be read"),
    ],
    ids=["ftp", "base64", "not-an-image", "tiff", "truncated"],
)
def test_a_bad_image_is_a_400_saying_what_is_wrong(http, vision_model, url, message):
    body = {"model": vision_model, "messages": [image_message(url)], "max_tokens": 1}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert error["param"] == "messages[0].content[1].image_url"
