"""Draft models through the server: a registered model (a lab-made quantized copy of the
default one) drafts in a companion worker beside the target's; the replies are the target's own; a draft
with another vocabulary is a 400 in each protocol's shape; a model's default draft is set
through /api/models/<name>."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import DRAFT_MODEL, LAB_PASSWORD, LAB_USER, OTHER_VOCAB, _manage

ASK = [{"role": "user", "content": "List the numbers from one to ten in words, one per line."}]
TOKENS = 24


@pytest.fixture(scope="module")
def drafts(lab_server, draft_model_folder, other_vocabulary_folder) -> None:
    for folder, name in ((draft_model_folder, DRAFT_MODEL), (other_vocabulary_folder, OTHER_VOCAB)):
        _manage(lab_server.env, "add_model", str(folder), "--name", name)


@pytest.fixture(scope="module")
def staff(lab_server, drafts) -> httpx.Client:
    """The lab's staff user, logged in with a session (an API key would turn key checks on
    for the whole session's server)."""
    with httpx.Client(base_url=lab_server.url, timeout=300) as session:
        session.get("/login/")
        token = session.cookies["csrftoken"]
        form = {"username": LAB_USER, "password": LAB_PASSWORD, "csrfmiddlewaretoken": token}
        session.post("/login/", data=form, headers={"Referer": f"{lab_server.url}/login/"})
        session.headers.update(
            {"X-CSRFToken": session.cookies["csrftoken"], "Referer": f"{lab_server.url}/"}
        )
        yield session


def test_a_draft_model_keeps_the_reply_beside_plain_requests(
    run_async, http, model, drafts, staff_http
):
    common = {"model": model, "messages": ASK, "max_tokens": TOKENS, "temperature": 0}

    async def scenario(client):
        return await asyncio.gather(
            client.chat.completions.create(**common),
            client.chat.completions.create(**common, extra_body={"draft_model": DRAFT_MODEL}),
            client.chat.completions.create(
                **{**common, "messages": [{"role": "user", "content": "Say hi."}]}
            ),
        )

    plain, drafted, _ = run_async(scenario)
    assert drafted.choices[0].message.content == plain.choices[0].message.content
    details = drafted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0
    assert details.accepted_prediction_tokens <= drafted.usage.completion_tokens
    assert plain.usage.completion_tokens_details is None
    # The draft runs in a companion worker beside the target's: a process of its own, not
    # a model loaded in its own right, nor inside the target's worker.
    assert DRAFT_MODEL not in staff_http.get("/health").json()["models_loaded"]
    workers = staff_http.get("/engine").json()["workers"]
    primary = next(w for w in workers if w["model"] == model and w["role"] == "primary")
    companion = next(w for w in workers if w["role"] == "companion")
    assert companion["model"] == DRAFT_MODEL and companion["primary"] == primary["id"]
    assert companion["state"] == "ready" and companion["pid"] not in (None, primary["pid"])
    speculative = staff_http.get("/stats").json()["models"][model]["speculative"]
    assert speculative["draft_models"] == []
    assert speculative["drafted_tokens"] >= speculative["accepted_tokens"] > 0
    assert speculative["fast_forwarded_tokens"] >= 0


def test_seeded_sampling_with_a_draft_model_is_reproducible(client, model, drafts):
    common = {"model": model, "messages": ASK, "max_tokens": TOKENS, "temperature": 0.8, "seed": 7}
    alone = client.chat.completions.create(**common)
    drafted = client.chat.completions.create(**common, extra_body={"draft_model": DRAFT_MODEL})
    assert drafted.choices[0].message.content == alone.choices[0].message.content


def test_another_vocabulary_is_a_400_naming_both_models(http, model, drafts):
    body = {"model": model, "max_tokens": 4, "draft_model": OTHER_VOCAB}
    chat = http.post("/v1/chat/completions", json={**body, "messages": ASK})
    assert chat.status_code == 400, chat.text
    error = chat.json()["error"]
    assert error["param"] == "draft_model" and error["code"] == "draft_vocabulary_mismatch"
    assert model in error["message"] and OTHER_VOCAB in error["message"]
    assert "0 only in" in error["message"] and "1 only in" in error["message"]
    messages = http.post("/v1/messages", json={**body, "messages": ASK})
    assert messages.status_code == 400
    assert messages.json()["type"] == "error"
    assert OTHER_VOCAB in messages.json()["error"]["message"]
    unknown = http.post("/v1/responses", json={**body, "input": "Hi", "draft_model": "nope"})
    assert unknown.status_code == 400
    assert unknown.json()["error"]["param"] == "draft_model"
    assert "'nope' is not a registered model" in unknown.json()["error"]["message"]


def test_a_model_s_default_draft_through_the_models_api(staff, http, model):
    url = f"/api/models/{model}"
    refused = staff.patch(url, json={"draft_model": OTHER_VOCAB})
    assert refused.status_code == 400
    assert f"{OTHER_VOCAB} has another vocabulary than {model}" in refused.json()["detail"]
    assert staff.patch(url, json={"draft_model": "nope"}).status_code == 400
    assert staff.patch(url, json={"context_length": 3}).status_code == 400
    assert http.patch(url, json={"draft_model": DRAFT_MODEL}).status_code in (401, 403)
    try:
        assert staff.patch(url, json={"draft_model": DRAFT_MODEL}).json()["draft_model"] == (
            DRAFT_MODEL
        )
        listed = {m["name"]: m for m in staff.get("/api/models").json()["results"]}
        assert listed[model]["draft_model"] == DRAFT_MODEL
        common = {"model": model, "messages": ASK, "max_tokens": TOKENS, "temperature": 0}
        defaulted = http.post("/v1/chat/completions", json=common).json()
        assert defaulted["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] > 0
        # A request's own choice wins over the default.
        off = http.post("/v1/chat/completions", json={**common, "draft_model": "none"}).json()
        assert "completion_tokens_details" not in off["usage"] or not off["usage"].get(
            "completion_tokens_details"
        )
        assert (
            off["choices"][0]["message"]["content"]
            == (defaulted["choices"][0]["message"]["content"])
        )
    finally:
        cleared = staff.patch(url, json={"draft_model": None})
    assert cleared.json()["draft_model"] is None


def test_responses_and_messages_report_the_drafted_tokens(http, model, drafts):
    body = {"model": model, "temperature": 0, "draft_model": DRAFT_MODEL}
    response = http.post(
        "/v1/responses", json={**body, "input": ASK[0]["content"], "max_output_tokens": TOKENS}
    ).json()
    details = response["usage"]["output_tokens_details"]
    assert details["reasoning_tokens"] == 0
    assert 0 < details["accepted_prediction_tokens"] <= response["usage"]["output_tokens"]
    assert details["rejected_prediction_tokens"] >= 0
    message = http.post("/v1/messages", json={**body, "messages": ASK, "max_tokens": TOKENS}).json()
    assert 0 < message["usage"]["accepted_prediction_tokens"] <= message["usage"]["output_tokens"]
    assert message["usage"]["rejected_prediction_tokens"] >= 0
    plain = http.post("/v1/messages", json={"model": model, "messages": ASK, "max_tokens": 4})
    assert "accepted_prediction_tokens" not in plain.json()["usage"]
