"""/v1 once keys exist: every endpoint, every kind of credential, via HTTP and the SDKs."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.conftest import DEFAULT_MODEL

CHAT = [{"role": "user", "content": "Hi"}]
# (method, path, body, the status once past the key check)
OPERATIONS = [
    ("GET", "/v1/models", None, 200),
    ("GET", f"/v1/models/{DEFAULT_MODEL}", None, 200),
    ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}, 200),
    ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1}, 200),
    ("POST", "/v1/responses", {"input": "Hi", "max_output_tokens": 1, "store": False}, 200),
    ("GET", "/v1/responses/resp_unknown", None, 404),
    ("DELETE", "/v1/responses/resp_unknown", None, 404),
    ("GET", "/v1/responses/resp_unknown/input_items", None, 404),
    ("POST", "/v1/messages", {"model": DEFAULT_MODEL, "max_tokens": 1, "messages": CHAT}, 200),
    ("POST", "/v1/messages/count_tokens", {"model": DEFAULT_MODEL, "messages": CHAT}, 200),
    ("GET", "/stats", None, 200),
    ("GET", "/engine", None, 200),
    ("GET", "/metrics", None, 200),
]
# The server's innards are for staff: any other valid key is a 403 there.
STAFF_ONLY = {"/stats", "/engine", "/metrics"}
REFUSED = ["none", "wrong", "revoked", "inactive"]
ALLOWED = ["member", "staff", "static"]


def credential(secured_server, case: str) -> str | None:
    if case == "none":
        return None
    if case == "wrong":
        return "mlx-" + "x" * 43
    return secured_server.keys[case]


def headers(path: str, key: str | None) -> dict[str, str]:
    """Anthropic clients send x-api-key, OpenAI clients a bearer token."""
    if key is None:
        return {}
    return {"x-api-key": key} if "/messages" in path else {"Authorization": f"Bearer {key}"}


def call(secured_server, method: str, path: str, body, key: str | None) -> httpx.Response:
    return httpx.request(
        method, secured_server.url + path, json=body, headers=headers(path, key), timeout=120
    )


@pytest.mark.parametrize("case", REFUSED + ALLOWED)
@pytest.mark.parametrize(("method", "path", "body", "status"), OPERATIONS)
def test_each_endpoint_and_credential(secured_server, method, path, body, status, case):
    response = call(secured_server, method, path, body, credential(secured_server, case))
    if case in ALLOWED:
        if path in STAFF_ONLY and case != "staff":
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "staff_only"
            return
        assert response.status_code == status, response.text
        return
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    error = response.json()
    if "/messages" in path:
        assert error["type"] == "error"
        assert error["error"]["type"] == "authentication_error"
        message = error["error"]["message"]
    else:
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["code"] == "invalid_api_key"
        message = error["error"]["message"]
    expected = {
        "none": "didn't provide an API key",
        "wrong": "Incorrect API key",
        "revoked": "revoked",
        "inactive": "inactive",
    }[case]
    assert expected in message


def test_health_needs_no_key(secured_server):
    assert httpx.get(secured_server.url + "/health").status_code == 200


def test_either_header_works_on_either_protocol(secured_server):
    key = secured_server.keys["member"]
    models = httpx.get(secured_server.url + "/v1/models", headers={"x-api-key": key})
    assert models.status_code == 200
    count = httpx.post(
        secured_server.url + "/v1/messages/count_tokens",
        json={"model": DEFAULT_MODEL, "messages": CHAT},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert count.status_code == 200 and count.json()["input_tokens"] > 0


def _strip_credentials(request: httpx.Request) -> None:
    # The SDKs insist on a key; "no credentials" means none reaches the server.
    for name in ("Authorization", "x-api-key"):
        request.headers.pop(name, None)


def without_credentials() -> httpx.Client:
    return httpx.Client(event_hooks={"request": [_strip_credentials]})


def openai_client(secured_server, key: str | None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{secured_server.url}/v1",
        api_key=key or "stripped",
        max_retries=0,
        http_client=without_credentials() if key is None else None,
    )


@pytest.mark.parametrize("case", REFUSED)
def test_openai_sdk_raises_authentication_error(secured_server, case):
    client = openai_client(secured_server, credential(secured_server, case))
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    assert raised.value.status_code == 401
    assert raised.value.code == "invalid_api_key"


@pytest.mark.parametrize("case", ["member", "staff"])
def test_openai_sdk_with_a_key(secured_server, case):
    client = openai_client(secured_server, secured_server.keys[case])
    reply = client.chat.completions.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=1)
    assert reply.usage.completion_tokens == 1
    stream = client.chat.completions.create(
        model=DEFAULT_MODEL, messages=CHAT, max_tokens=1, stream=True
    )
    assert [chunk.choices[0].finish_reason for chunk in stream][-1] == "length"


def anthropic_client(secured_server, **auth) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=secured_server.url, max_retries=0, **auth)


@pytest.mark.parametrize("case", ["wrong", "revoked", "inactive"])
def test_anthropic_sdk_raises_authentication_error(secured_server, case):
    client = anthropic_client(secured_server, api_key=credential(secured_server, case))
    with pytest.raises(anthropic.AuthenticationError) as raised:
        client.messages.create(model=DEFAULT_MODEL, max_tokens=1, messages=CHAT)
    assert raised.value.status_code == 401
    assert raised.value.body["error"]["type"] == "authentication_error"


def test_anthropic_sdk_without_a_key(secured_server):
    # This SDK brings its own HTTP client (a fork of httpx), with the same request hooks.
    http_client = anthropic.DefaultHttpxClient(event_hooks={"request": [_strip_credentials]})
    client = anthropic_client(secured_server, api_key="x", http_client=http_client)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.count_tokens(model=DEFAULT_MODEL, messages=CHAT)


@pytest.mark.parametrize("auth", ["api_key", "auth_token"])
def test_anthropic_sdk_with_a_key(secured_server, auth):
    client = anthropic_client(secured_server, **{auth: secured_server.keys["member"]})
    message = client.messages.create(model=DEFAULT_MODEL, max_tokens=1, messages=CHAT)
    assert message.usage.output_tokens == 1


def test_max_tokens_cap_is_enforced(secured_server):
    client = openai_client(secured_server, secured_server.keys["member"])
    with pytest.raises(openai.BadRequestError, match="at most 2"):
        client.chat.completions.create(model=DEFAULT_MODEL, messages=CHAT, max_tokens=3)
    # Without max_tokens the default is the cap or less.
    reply = client.completions.create(model=DEFAULT_MODEL, prompt="One, two, three,")
    assert reply.usage.completion_tokens <= 2


def test_oversized_body_is_413_in_each_protocols_shape(secured_server):
    key = secured_server.keys["member"]
    big = b'{"prompt": "' + b"a" * 100_000 + b'"}'  # over this server's 2 KiB limit
    openai_style = httpx.post(
        secured_server.url + "/v1/completions",
        content=big,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert openai_style.status_code == 413
    assert openai_style.json()["error"]["code"] == "request_too_large"
    anthropic_style = httpx.post(
        secured_server.url + "/v1/messages",
        content=big,
        headers={"x-api-key": key, "Content-Type": "application/json"},
    )
    assert anthropic_style.status_code == 413
    assert anthropic_style.json()["error"]["type"] == "request_too_large"
