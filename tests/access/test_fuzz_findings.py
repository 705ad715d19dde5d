"""What schemathesis found: inputs that were 500s (or silently accepted) are now 400s."""

from __future__ import annotations

import httpx
import pytest

from inference.response_store import response_store
from tests.conftest import DEFAULT_MODEL

HI = [{"role": "user", "content": "Hi"}]
FINDINGS = [
    # mlx-lm's samplers raised mid-generation on these.
    ("/v1/chat/completions", {"temperature": 1, "top_k": 49152}, "top_k must be less than"),
    (
        "/v1/chat/completions",
        {"temperature": 1, "xtc_probability": 0.5, "xtc_threshold": 0.7},
        "xtc_threshold must be at most 0.5",
    ),
    # Unhashable or non-iterable values where a string or a list was expected.
    ("/v1/chat/completions", {"messages": [{"role": {}, "content": "Hi"}]}, "role must be"),
    (
        "/v1/chat/completions",
        {"tool_choice": {"type": "function", "function": [None]}},
        "tool_choice must be",
    ),
    ("/v1/chat/completions", {"tools": {}}, "tools must be an array"),
    ("/v1/responses", {"input": [{"type": {}}]}, "type must be a string"),
    (
        "/v1/responses",
        {"input": [{"role": "user", "content": [{"type": {}, "text": "x"}]}]},
        "only text content",
    ),
    # Accepted before, and taken as true.
    ("/v1/completions", {"prompt": "Hi", "logprobs": "yes"}, "logprobs must be of type bool"),
]


@pytest.mark.parametrize(("path", "fields", "message"), FINDINGS)
def test_refused_with_a_400(secured_server, path, fields, message):
    body = {"model": DEFAULT_MODEL, "max_tokens": 1, **fields}
    if path == "/v1/chat/completions":
        body.setdefault("messages", HI)
    if path == "/v1/responses":
        body.pop("max_tokens")
    response = httpx.post(
        secured_server.url + path,
        json=body,
        headers={"Authorization": f"Bearer {secured_server.keys['member']}"},
        timeout=120,
    )
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]


def test_reasoning_item_that_is_not_a_list_is_ignored(secured_server):
    body = {
        "model": DEFAULT_MODEL,
        "input": [{"type": "reasoning", "content": True}, {"role": "user", "content": "Hi"}],
        "max_output_tokens": 1,
        "store": False,
    }
    response = httpx.post(
        secured_server.url + "/v1/responses",
        json=body,
        headers={"Authorization": f"Bearer {secured_server.keys['member']}"},
        timeout=120,
    )
    assert response.status_code == 200, response.text


def test_admin_shows_stored_input_as_sent(admin_client):
    """Such input is now accepted and stored; its admin page must still render."""
    odd = [
        {"type": "reasoning", "content": True, "id": "rs_1"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": 5}]},
    ]
    body = {"id": "resp_odd", "model": "m", "status": "completed", "output": [], "usage": {}}
    response_store(body=body, input_items=odd, instructions="", previous_id=None, owner="")
    page = admin_client.get("/admin/inference/storedresponse/resp_odd/change/")
    assert page.status_code == 200 and b"<b>user</b> 5" in page.content


def test_an_api_path_with_a_newline_is_a_json_404(client):
    """A decoded %0A once slipped past the JSON catch-all of /api into Django's HTML page."""
    answer = client.get("/api/messages/l%0AT/attachments/null")
    assert answer.status_code == 404 and answer["Content-Type"] == "application/json"
    assert answer.json()["detail"].startswith("Unknown endpoint /api/messages/l\nT")
