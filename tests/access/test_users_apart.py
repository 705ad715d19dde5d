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
    assert _cached_tokens(secured_server, member, messages) == 0
    # The same prompt from another user: nothing reused, so nothing confirmed.
    assert _cached_tokens(secured_server, staff, messages) == 0
    # Its owner reuses it, and a new question under the same system prompt too.
    assert _cached_tokens(secured_server, member, messages) > 20
    follow_up = [messages[0], {"role": "user", "content": "What is it?"}]
    assert _cached_tokens(secured_server, member, follow_up) > 20
