"""Audio in chat messages, through the official `openai` SDK, on the session's live server
and a real model worker: a tiny random-weight Gemma 3n (tests/audio_models.py) served
through mlx-vlm, registered by tests/vision_fixtures.py's `gemma3n_model`."""

from __future__ import annotations

import base64

import openai
import pytest

from tests.audio_models import wav

QUESTION = "What do you hear?"


def audio_message(data: bytes, audio_format: str = "wav") -> dict:
    encoded = base64.b64encode(data).decode()
    return {
        "role": "user",
        "content": [
            {"type": "input_audio", "input_audio": {"data": encoded, "format": audio_format}},
            {"type": "text", "text": QUESTION},
        ],
    }


def ask(client, model: str, messages: list[dict]):
    return client.chat.completions.create(
        model=model, messages=messages, max_tokens=4, temperature=0
    )


def test_the_registry_says_gemma3n_takes_audio(http, gemma3n_model):
    described = http.get(f"/v1/models/{gemma3n_model}").json()
    assert described["capabilities"] == ["chat", "audio"]


def test_the_sdk_sends_a_wav_and_gets_an_answer(client, gemma3n_model):
    first = ask(client, gemma3n_model, [audio_message(wav(0.5, seed=1))])
    assert first.choices[0].finish_reason == "length"
    assert first.usage.prompt_tokens > 188  # the clip's soft tokens, and the question
    again = ask(client, gemma3n_model, [audio_message(wav(0.5, seed=1))])
    assert again.choices[0].message.content == first.choices[0].message.content


def test_a_clip_over_the_limit_is_a_400_naming_it(client, gemma3n_model):
    # 301 seconds at 1 kHz: past the default MLXLAB_MAX_AUDIO_SECONDS (300), in 600 kB.
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, gemma3n_model, [audio_message(wav(301, frequency=100.0, rate=1000))])
    message = caught.value.body["message"]
    assert "more than this server's limit of 300 seconds (MLXLAB_MAX_AUDIO_SECONDS)" in message
    assert caught.value.body["param"] == "messages[0].content[0].input_audio"


def test_an_image_is_refused_by_gemma3n(client, gemma3n_model):
    from tests.vision_models import png

    url = f"data:image/png;base64,{base64.b64encode(png(16, 16, seed=1)).decode()}"
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, gemma3n_model, [image])
    assert caught.value.body["message"] == f"model '{gemma3n_model}' does not accept image input"
