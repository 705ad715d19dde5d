"""Every input is bounded and every bad one is a 4xx in the surface's own error shape.

Each case was a 500, a hang or a silent acceptance before the bounds were added.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import DEFAULT_MODEL

HI = [{"role": "user", "content": "hi"}]
# The surfaces a generation arrives on, with a valid body of each and its error shape.
SURFACES = {
    "/v1/chat/completions": ({"messages": HI, "max_tokens": 1}, "openai"),
    "/v1/completions": ({"prompt": "hi", "max_tokens": 1}, "openai"),
    "/v1/responses": ({"input": "hi", "max_output_tokens": 1}, "openai"),
    "/v1/messages": ({"messages": HI, "max_tokens": 1}, "anthropic"),
    "/v1/messages/count_tokens": ({"messages": HI}, "anthropic"),
}


def _message(response, shape: str) -> str:
    body = response.json()
    if shape == "anthropic":
        assert body["type"] == "error", body
        assert body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["type"] == "invalid_request_error", body
    return body["error"]["message"]


def _raw(path: str, extra: str) -> str:
    """A valid body of `path` as JSON text, with `extra` spliced in as its last field."""
    body, _ = SURFACES[path]
    text = json.dumps({"model": DEFAULT_MODEL, **body})
    return text[:-1] + ", " + extra + "}"


@pytest.mark.parametrize("path", SURFACES)
@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ('"temperature": NaN', "NaN is not a JSON number"),
        ('"temperature": Infinity', "Infinity is not a JSON number"),
        ('"top_p": -Infinity', "-Infinity is not a JSON number"),
        ('"temperature": 1e999', "1e999 is out of range"),
        ('"x": ' + "[" * 100_000 + "]" * 100_000, "nests deeper than the 64 levels"),
        ('"x": ' + "{" + '"a": {' * 70 + "}" * 71, "nests deeper than the 64 levels"),
    ],
)
def test_unbounded_json_is_a_400(http, path, extra, reason):
    response = http.post(
        path, content=_raw(path, extra), headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text[:300]
    assert reason in _message(response, SURFACES[path][1])


def test_json_at_the_depth_limit_is_read(http):
    schema = {"type": "object"}
    for _ in range(31):  # each adds two levels: 64 in all, with the body around them
        schema = {"type": "object", "properties": {"a": schema}}
    body = {"model": DEFAULT_MODEL, "messages": HI, "max_tokens": 1, "guided_json": schema}
    assert http.post("/v1/messages/count_tokens", json=body).status_code == 200


CHAT_BOUNDS = [
    ({"repetition_context_size": 10**10}, "repetition_context_size must be at most 4096"),
    ({"presence_context_size": 4097}, "presence_context_size must be at most 4096"),
    ({"frequency_context_size": 10**10}, "frequency_context_size must be at most 4096"),
    ({"seed": 2**70}, "seed must be at most 18446744073709551615"),
    ({"seed": -(2**64)}, "seed must be at least -9223372036854775808"),
    # A field passed through to the template as sent: msgpack carries 64 bits at most.
    (
        {"messages": [{"role": "user", "content": "Hi", "extra": {"n": 2**70}}]},
        "the request holds an integer outside the 64-bit range",
    ),
    ({"n": 9}, "n must be at most 8"),
    ({"n": 0}, "n must be at least 1"),
    ({"stop": ["x"] * 17}, "stop may hold at most 16 sequences"),
    ({"stop": "x" * 257}, "each of stop may be at most 256 characters long"),
    ({"logit_bias": {str(i): 1 for i in range(301)}}, "logit_bias may hold at most 300"),
    ({"logit_bias": {"5": 101}}, "logit_bias values must be between -100 and 100"),
    (
        {"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]},
        "tools may hold at most 128 tools",
    ),
    (
        {"guided_choice": [f"choice number {i}" for i in range(5000)]},
        "guided_choice is larger than the 65536 bytes allowed",
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"enum": ["v" * 100] * 700}},
            }
        },
        "response_format is larger than the 65536 bytes allowed",
    ),
]


def _refused(http, path: str, fields: dict, reason: str) -> None:
    body = {"model": DEFAULT_MODEL, "messages": HI, "max_tokens": 1, **fields}
    response = http.post(path, json=body)
    assert response.status_code == 400, response.text[:300]
    assert reason in _message(response, "anthropic" if path == "/v1/messages" else "openai")


@pytest.mark.parametrize(("fields", "reason"), CHAT_BOUNDS)
def test_chat_bounds(http, fields, reason):
    _refused(http, "/v1/chat/completions", fields, reason)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"stop_sequences": ["x"] * 17}, "stop_sequences may hold at most 16 sequences"),
        ({"metadata": {"user_id": "u" * 257}}, "metadata.user_id"),
        ({"metadata": {"blob": "x" * 100_000}}, "metadata.blob: Extra inputs are not permitted"),
    ],
)
def test_messages_bounds(http, fields, reason):
    _refused(http, "/v1/messages", fields, reason)


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ({f"k{i}": "v" for i in range(17)}, "metadata may hold at most 16 pairs"),
        ({"k" * 65: "v"}, "metadata keys may be at most 64 characters"),
        ({"k": "v" * 513}, "metadata values must be strings of at most 512 characters"),
        ({"k": 5}, "metadata values must be strings"),
    ],
)
def test_responses_metadata_bounds(http, metadata, reason):
    body = {"model": DEFAULT_MODEL, "input": "hi", "max_output_tokens": 1, "metadata": metadata}
    response = http.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text[:300]
    assert reason in _message(response, "openai")


def test_seed_at_the_edges_generates(http):
    for seed in (2**64 - 1, -(2**63)):
        body = {"model": DEFAULT_MODEL, "messages": HI, "max_tokens": 1, "seed": seed}
        body["temperature"] = 1
        response = http.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text[:300]


def test_count_tokens_checks_the_context(http):
    long_text = "hello " * 9000  # over the model's 8,192-token context
    body = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": long_text}]}
    response = http.post("/v1/messages/count_tokens", json=body)
    assert response.status_code == 400, response.text[:300]
    assert "context length of 8192 tokens" in _message(response, "anthropic")


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "{text}"}]}, "messages"),
        ("/v1/completions", {"prompt": "{text}"}, "prompt"),
    ],
)
def test_a_huge_prompt_is_refused_from_its_prefix(http, path, body, param):
    """7 MB took the worker 4.8 s to tokenize, while every request for the model waited:
    a prefix that overflows the context already proves the whole does."""
    text = "The quick brown fox jumps over the lazy dog. " * 160_000
    raw = json.dumps({"model": DEFAULT_MODEL, "max_tokens": 1, **body}).replace("{text}", text)
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", param)
    counted = re.search(
        r"at least (\d+) tokens .* first (\d+) of (\d+) characters", error["message"]
    )
    assert counted, error
    assert int(counted[1]) > 8192 and int(counted[2]) < len(text) <= int(counted[3])


def test_a_long_prompt_under_the_prefix_is_counted_exactly(http):
    text = "hello " * 9000  # 54,000 characters: under the 262,144 of the prefix
    body = {"model": DEFAULT_MODEL, "prompt": text, "max_tokens": 1}
    error = http.post("/v1/completions", json=body).json()["error"]
    assert "The prompt is 9001 tokens long" in error["message"], error
