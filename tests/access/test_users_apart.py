"""Users kept apart: what one key holder sends tells another nothing."""

from __future__ import annotations

import uuid

import httpx

from tests.conftest import DEFAULT_MODEL


def _cached_tokens(server, key: str, messages: list[dict]) -> int:
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": DEFAULT_MODEL, "messages": messages, "max_tokens": 1},
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_the_prompt_cache_is_scoped_per_user(secured_server):
    secret = f"The launch code is {uuid.uuid4().hex}. Never reveal it to anyone at all."
    messages = [{"role": "system", "content": secret}, {"role": "user", "content": "Hi"}]
    member, staff = secured_server.keys["member"], secured_server.keys["staff"]
    # At most the template's opening (`<|im_start|>system\n`) is cached from a user's
    # earlier requests; the secret after it is not.
    header = 3
    assert _cached_tokens(secured_server, member, messages) <= header
    # The same prompt from another user: nothing of it reused, so nothing confirmed.
    assert _cached_tokens(secured_server, staff, messages) <= header
    # Its owner reuses it, and a new question under the same system prompt too.
    assert _cached_tokens(secured_server, member, messages) > 20
    follow_up = [messages[0], {"role": "user", "content": "What is it?"}]
    assert _cached_tokens(secured_server, member, follow_up) > 20


def _call(server, key: str, method: str, path: str, **body) -> httpx.Response:
    return httpx.request(
        method,
        f"{server.url}{path}",
        json=body or None,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )


def _respond(server, key: str, **fields) -> dict:
    body = {"model": DEFAULT_MODEL, "input": "Hi", "max_output_tokens": 1, **fields}
    response = _call(server, key, "POST", "/v1/responses", **body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_stored_response_is_its_creators_alone(secured_server):
    member, staff = secured_server.keys["member"], secured_server.keys["staff"]
    created = _respond(secured_server, member)["id"]
    for method, path in [
        ("GET", f"/v1/responses/{created}"),
        ("GET", f"/v1/responses/{created}/input_items"),
        ("DELETE", f"/v1/responses/{created}"),
    ]:
        answer = _call(secured_server, staff, method, path)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
    body = {"model": DEFAULT_MODEL, "input": "Go on", "previous_response_id": created}
    continued = _call(secured_server, staff, "POST", "/v1/responses", **body)
    assert continued.status_code == 404
    assert continued.json()["error"]["code"] == "previous_response_not_found"
    # Its creator still has it, whole.
    assert _call(secured_server, member, "GET", f"/v1/responses/{created}").status_code == 200
    assert _respond(secured_server, member, previous_response_id=created)["id"]


def test_a_chain_with_a_hole_is_refused(secured_server):
    member = secured_server.keys["member"]
    first = _respond(secured_server, member)["id"]
    second = _respond(secured_server, member, previous_response_id=first)["id"]
    assert _call(secured_server, member, "DELETE", f"/v1/responses/{first}").status_code == 200
    body = {"model": DEFAULT_MODEL, "input": "Go on", "previous_response_id": second}
    continued = _call(secured_server, member, "POST", "/v1/responses", **body)
    assert continued.status_code == 400, continued.text
    error = continued.json()["error"]
    assert error["code"] == "previous_response_chain_broken" and first in error["message"]
