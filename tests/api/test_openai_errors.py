"""Every client mistake is an OpenAI-shaped 4xx, never a 500 or a dropped connection."""

from __future__ import annotations

import openai
import pytest

HI = [{"role": "user", "content": "hi"}]

CASES = [
    ({"temperature": -1}, "temperature must be at least 0"),
    ({"temperature": "hot"}, "temperature must be of type ('float', 'int')"),
    ({"top_p": 2}, "top_p must be at most 1"),
    ({"top_k": -1}, "top_k must be at least 0"),
    ({"top_k": 1.5}, "top_k must be of type int"),
    ({"min_p": 1.5}, "min_p must be at most 1"),
    ({"xtc_probability": 2}, "xtc_probability must be at most 1"),
    ({"xtc_threshold": -0.1}, "xtc_threshold must be at least 0"),
    ({"repetition_penalty": -1}, "repetition_penalty must be at least 0"),
    ({"repetition_context_size": -1}, "repetition_context_size must be at least 0"),
    ({"presence_penalty": "x"}, "presence_penalty must be of type ('float', 'int')"),
    ({"presence_context_size": -2}, "presence_context_size must be at least 0"),
    ({"frequency_penalty": []}, "frequency_penalty must be of type ('float', 'int')"),
    ({"frequency_context_size": -3}, "frequency_context_size must be at least 0"),
    ({"seed": "x"}, "seed must be of type int"),
    ({"logit_bias": {"a": 1}}, "logit_bias must be a dict of int to float"),
    ({"logit_bias": {"5": "x"}}, "logit_bias must be a dict of int to float"),
    ({"logit_bias": [1]}, "logit_bias must be a dict of int to float"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias token id 99999999 is out of range"),
    ({"logprobs": "yes"}, "logprobs must be of type bool"),
    ({"logprobs": True, "top_logprobs": 12}, "top_logprobs must be at most 11"),
    ({"top_logprobs": -2}, "top_logprobs must be at least 0"),
    ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ({"max_completion_tokens": "many"}, "max_completion_tokens must be of type int"),
    ({"max_tokens": 10**7}, "context length is 8192 tokens"),
    ({"stream": "yes"}, "stream must be of type bool"),
    ({"stop": 5}, "stop must be a string or a list of strings"),
    ({"stream_options": "x"}, "stream_options must be an object"),
    ({"messages": []}, "messages required"),
    ({"messages": "hi"}, "messages required"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role must be one of"),
    ({"messages": [{"role": "user", "content": 5}]}, "content must be a string or an array"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages[0].content[0].image_url.url must be a string",
    ),
    (
        {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": "x"}]}]},
        "image_url parts are accepted in user messages only",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": "x"}]}]},
        "content parts of type 'video_url' are not supported",
    ),
]


@pytest.mark.parametrize("fields, message", CASES, ids=[str(c[0])[:40] for c in CASES])
def test_invalid_chat_fields_are_400_with_the_reference_message(http, model, fields, message):
    body = {"model": model, "messages": HI, **fields}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}


def test_sdk_surfaces_the_error_message(client, model):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model, messages=HI, top_p=3)
    assert caught.value.status_code == 400
    assert caught.value.body["message"] == "top_p must be at most 1"
    assert caught.value.body["param"] == "top_p"


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"[1, 2]", b"\xff\xfe", b"", b'"text"'],
    ids=["broken", "array", "bytes", "empty", "string"],
)
def test_malformed_bodies_are_400(http, raw):
    response = http.post(
        "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=HI)
    assert caught.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_wrong_method_is_405(http, method):
    response = http.request(method, "/v1/chat/completions")
    assert response.status_code == 405
    assert "not allowed" in response.json()["error"]["message"]
    assert response.headers["allow"] == "POST"


def test_models_refuses_post(http):
    assert http.post("/v1/models").status_code == 405


def test_unknown_endpoint_is_openai_404(http):
    response = http.get("/v1/nothing-here")
    assert response.status_code == 404
    assert "Unknown endpoint" in response.json()["error"]["message"]


def test_server_survives_the_bad_inputs(http, model):
    response = http.post(
        "/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 2}
    )
    assert response.status_code == 200
    assert http.get("/health").json()["status"] == "ok"
