"""The admin site renders stored responses, models and their chains for staff."""

from __future__ import annotations

import pytest

from inference.models import LanguageModel, StoredResponse
from inference.response_store import BrokenChain, response_chain, response_store


def body(response_id: str, text: str) -> dict:
    return {
        "id": response_id,
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }


@pytest.fixture
def chain(db):
    user = [{"type": "message", "role": "user", "content": "hello", "id": "msg_1"}]
    response_store(
        body=body("resp_a", "first answer"),
        input_items=user,
        instructions="be brief",
        previous_id=None,
        owner="user:1",
    )
    response_store(
        body=body("resp_b", "second answer"),
        input_items=user,
        instructions="",
        previous_id="resp_a",
        owner="user:1",
    )
    return "resp_b"


def test_stored_responses_list_search_and_chain(admin_client, chain):
    listing = admin_client.get("/admin/inference/storedresponse/?q=second")
    assert listing.status_code == 200
    assert b"resp_b" in listing.content and b"resp_a" not in listing.content
    detail = admin_client.get(f"/admin/inference/storedresponse/{chain}/change/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert page.index("first answer") < page.index("second answer")  # the chain, oldest first
    assert "be brief" in page


def test_models_admin_lists_models(admin_client):
    LanguageModel.objects.create(name="tiny", path="/tmp/tiny", architecture="llama")
    response = admin_client.get("/admin/inference/languagemodel/")
    assert response.status_code == 200 and b"tiny" in response.content


def test_admin_refuses_anonymous(client):
    assert client.get("/admin/inference/storedresponse/").status_code == 302


def test_byte_budget_evicts_oldest_first(db, settings):
    settings.MLXLAB = settings.MLXLAB.replace(responses_max_bytes=900)
    for index in range(4):
        response_store(
            body=body(f"resp_{index}", "x" * 200),
            input_items=[],
            instructions="",
            previous_id=None,
            owner="user:1",
        )
    ids = ("resp_0", "resp_1", "resp_2", "resp_3")
    kept = [r for r in ids if response_chain(response_id=r, owner="user:1")]
    assert kept[-1] == "resp_3" and "resp_0" not in kept and len(kept) < 4


def test_the_byte_budget_is_each_owners_own(db, settings):
    settings.MLXLAB = settings.MLXLAB.replace(responses_max_bytes=900)
    store = dict(input_items=[], instructions="", previous_id=None)
    response_store(body=body("resp_mine", "x" * 200), owner="user:1", **store)
    for index in range(6):  # another user fills their own budget many times over
        response_store(body=body(f"resp_flood_{index}", "y" * 200), owner="user:2", **store)
    assert response_chain(response_id="resp_mine", owner="user:1") is not None
    assert response_chain(response_id="resp_mine", owner="user:2") is None  # not theirs


def test_a_previous_response_deleted_during_a_generation(db):
    """The new response is still stored; continuing it is refused, never truncated."""
    store = dict(input_items=[], instructions="", owner="user:1")
    response_store(body=body("resp_gone", "first"), previous_id=None, **store)
    StoredResponse.objects.filter(id="resp_gone").delete()  # while the next one generated
    stored = response_store(body=body("resp_next", "second"), previous_id="resp_gone", **store)
    assert stored.previous_id is None and stored.previous_ref == "resp_gone"
    with pytest.raises(BrokenChain) as broken:
        response_chain(response_id="resp_next", owner="user:1")
    assert broken.value.missing_id == "resp_gone"
