"""The chat websocket on the real model, through Channels' WebsocketCommunicator."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from inference.engines import supervisor
from lab.message_tree import conversation_path
from lab.models import Conversation, Message
from lab.routing import websocket_urlpatterns
from tests.conftest import DEFAULT_MODEL, THINKING_MODEL

pytestmark = pytest.mark.django_db(transaction=True)

GREEDY = {"temperature": 0, "max_tokens": 6}


async def connected(user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/chat/")
    communicator.scope["user"] = user
    accepted, _ = await communicator.connect()
    assert accepted
    return communicator


async def until(communicator, kind: str, timeout: float = 120) -> tuple[dict, list[dict]]:
    """Read messages until one of `kind` arrives; returns it and everything before it."""
    seen = []
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        if message["type"] == kind:
            return message, seen
        assert message["type"] != "error", message
        seen.append(message)


def send(content: str, conversation=None, **settings) -> dict:
    return {
        "type": "send",
        "conversation": conversation,
        "content": content,
        "model": DEFAULT_MODEL,
        "params": GREEDY,
        **settings,
    }


def run(scenario):
    return asyncio.run(scenario())


def test_anonymous_socket_is_closed_with_4401():
    async def scenario():
        communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/chat/")
        communicator.scope["user"] = AnonymousUser()
        accepted, code = await communicator.connect()
        assert (accepted, code) == (False, 4401)

    run(scenario)


def test_send_streams_and_saves_the_reply(registered_models, alice):
    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(send("What is the capital of France?", system_prompt="Be brief."))
        done, before = await until(chat, "done")
        await chat.disconnect()
        return done, before

    done, before = run(scenario)
    kinds = [m["type"] for m in before]
    assert kinds[:3] == ["conversation", "user_message", "start"]
    deltas = [m for m in before if m["type"] == "delta"]
    assert len(deltas) >= 2  # streamed token by token, not in one piece
    reply = done["message"]
    assert reply["content"] == "".join(d["text"] for d in deltas)
    assert "Paris" in reply["content"]
    stats = reply["stats"]
    assert stats["finish_reason"] == "length" and stats["completion_tokens"] == 6
    assert stats["ttft_ms"] > 0 and stats["tokens_per_second"] > 0
    assert stats["prompt_tokens"] > 10 and stats["model"] == DEFAULT_MODEL
    conversation = Conversation.objects.get(owner=alice)
    assert conversation.title == "What is the capital of France?"
    assert conversation.system_prompt == "Be brief."
    assert conversation.params["temperature"] == 0
    assert [m.role for m in conversation.messages.all()] == ["user", "assistant"]
    assert conversation.messages.last().content == reply["content"]


def test_stop_cancels_in_the_engine_and_keeps_the_partial_reply(registered_models, alice):
    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(
            send("Write a long story about a dragon.", params={"max_tokens": 400})
        )
        await until(chat, "delta")
        await chat.send_json_to({"type": "stop"})
        done, _ = await until(chat, "done")
        for _ in range(50):  # the worker drops the row at its next step
            in_flight = supervisor().live_status(DEFAULT_MODEL).result().in_flight
            if in_flight == 0:
                break
            await asyncio.sleep(0.1)
        await chat.disconnect()
        return done, in_flight

    done, in_flight = run(scenario)
    stats = done["message"]["stats"]
    assert stats["finish_reason"] == "cancelled"
    assert 1 <= stats["completion_tokens"] < 400
    assert in_flight == 0
    assert Message.objects.get(id=done["message"]["id"]).content == done["message"]["content"]


def test_regenerate_and_edit_add_versions_of_the_turn(registered_models, alice):
    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(send("Say hello."))
        first, before = await until(chat, "done")
        conversation = before[0]["conversation"]["id"]
        user_id = before[1]["message"]["id"]
        await chat.send_json_to(
            {"type": "regenerate", "conversation": conversation, "model": DEFAULT_MODEL,
             "params": {"temperature": 0.9, "seed": 7, "max_tokens": 6}}
        )  # fmt: skip
        second, between = await until(chat, "done")
        await chat.send_json_to(
            {"type": "edit", "conversation": conversation, "message": user_id,
             "content": "What is the capital of France?", "model": DEFAULT_MODEL,
             "params": GREEDY}
        )  # fmt: skip
        third, edited = await until(chat, "done")
        await chat.disconnect()
        return conversation, user_id, first, second, between, third, edited

    conversation, user_id, first, second, between, third, edited = run(scenario)
    assert {"type": "truncated", "conversation": conversation, "after": user_id} in between
    assert second["message"]["versions"] == [first["message"]["id"], second["message"]["id"]]
    assert second["message"]["version"] == 2
    # The edit hides the whole branch (its message was the first turn) and adds a version.
    assert {"type": "truncated", "conversation": conversation, "after": None} in edited
    new_user = [m for m in edited if m["type"] == "user_message"][0]["message"]
    assert new_user["content"] == "What is the capital of France?"
    assert new_user["versions"] == [user_id, new_user["id"]]
    assert "Paris" in third["message"]["content"]
    assert third["message"]["parent"] == new_user["id"]
    path = conversation_path(Conversation.objects.get(id=conversation))
    assert [(m.id, m.role) for m in path] == [
        (new_user["id"], "user"),
        (third["message"]["id"], "assistant"),
    ]
    assert Message.objects.filter(conversation_id=conversation).count() == 5  # all kept
    assert Conversation.objects.get(id=conversation).title == "What is the capital of France?"


def test_thinking_switch_splits_the_reasoning(registered_models, alice):
    async def reply(thinking: bool):
        chat = await connected(alice)
        await chat.send_json_to(send("Hi", model=THINKING_MODEL, thinking=thinking))
        done, before = await until(chat, "done")
        await chat.disconnect()
        return done["message"], [m["type"] for m in before]

    thought, kinds = run(lambda: reply(True))
    assert "reasoning" in kinds and thought["reasoning"]
    assert "<think>" not in thought["content"]
    plain, kinds = run(lambda: reply(False))
    assert "reasoning" not in kinds and plain["reasoning"] == ""


@pytest.mark.parametrize(
    "message, error",
    [
        (send("hi", params={"temperature": "hot"}), "temperature must be of type"),
        (send("hi", model="no-such-model"), "no-such-model"),
        (send("   "), "content must be a non-empty string"),
        (send("hi", params={"top_k": 10**9}), "top_k must be less than the vocabulary size"),
        (send("hi", structured={"kind": "regex"}), "structured must be null"),
        (send("hi", params={"draft_model": "no-such-draft"}), "is not a registered model"),
        (send("hi", params={"num_draft_tokens": 0}), "num_draft_tokens must be at least 1"),
        (send("hi", params={"kv_config": [{"bits": 3}]}), "kv_config[0].bits must be 4 or 8"),
        # The worker's check: the model's layers, which only it knows.
        (send("hi", params={"kv_config": [None]}), "this model has 30, the request gave 1"),
        (send("hi", conversation=999), "no conversation 999 of yours"),
        (send("hi", side_by_side_run="a run"), "side_by_side_run must be"),
        ({"type": "dance"}, "type must be one of"),
        ("not json", "messages must be JSON objects"),
    ],
)
def test_refusals_change_nothing(registered_models, alice, message, error):
    async def scenario():
        chat = await connected(alice)
        if isinstance(message, str):
            await chat.send_to(text_data=message)
        else:
            await chat.send_json_to(message)
        answer = await chat.receive_json_from(timeout=60)
        await chat.disconnect()
        return answer

    answer = run(scenario)
    assert answer["type"] == "error" and error in answer["message"]
    assert not Conversation.objects.exists()


def test_one_reply_at_a_time(registered_models, alice):
    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(send("Tell me a story.", params={"max_tokens": 200}))
        await until(chat, "start")
        await chat.send_json_to(send("And another."))
        busy, _ = await until(chat, "error")
        await chat.send_json_to({"type": "stop"})
        done, _ = await until(chat, "done")
        await chat.disconnect()
        return busy, done

    busy, done = run(scenario)
    assert "still being generated" in busy["message"]
    assert done["message"]["stats"]["finish_reason"] == "cancelled"


def test_a_worker_that_dies_mid_reply_keeps_the_partial_reply_marked_interrupted(
    registered_models, alice
):
    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(
            send("Write a long story about a dragon.", params={"max_tokens": 400})
        )
        await until(chat, "delta")
        os.kill(supervisor().workers[DEFAULT_MODEL].pid, signal.SIGKILL)
        done, _ = await until(chat, "done")
        error = await chat.receive_json_from(timeout=30)
        await chat.disconnect()
        return done, error

    done, error = run(scenario)
    stats = done["message"]["stats"]
    assert stats["finish_reason"] == "interrupted"
    assert done["message"]["content"]  # what was generated before the worker died
    assert error == {
        "type": "error",
        "message": "inference engine unavailable: the engine worker stopped while streaming "
        "this response (signal SIGKILL); it is being respawned",
    }
    saved = Message.objects.get(id=done["message"]["id"])
    assert saved.content == done["message"]["content"]
    assert saved.stats["finish_reason"] == "interrupted"
    _until_ready(DEFAULT_MODEL)


def _until_ready(model: str, timeout: float = 300) -> None:
    """Until the model's worker is ready: a test that kills it leaves it as it found it, so
    the next test's request does not meet a worker still respawning (whose wait, 30 s,
    a respawn on a loaded machine outlasted in the suite on PostgreSQL)."""
    deadline = time.monotonic() + timeout
    while (worker := supervisor().workers.get(model)) is None or worker.state != "ready":
        assert time.monotonic() < deadline, f"the worker for {model} was not respawned"
        time.sleep(0.2)


def test_a_structured_reply_counts_its_fast_forwarded_tokens(registered_models, alice):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    }

    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(
            send(
                "Name a city and its country as JSON.",
                structured={"kind": "json_schema", "schema": schema},
                params={**GREEDY, "max_tokens": 40},
            )
        )
        done, _ = await until(chat, "done")
        await chat.disconnect()
        return done

    stats = run(scenario)["message"]["stats"]
    assert stats["fast_forwarded_tokens"] > 0
    assert stats["accepted_prediction_tokens"] == stats["rejected_prediction_tokens"] == 0


def test_a_reply_drafted_by_prompt_lookup_is_the_plain_reply(registered_models, alice):
    text = "Repeat this sentence exactly: the quick brown fox jumps over the lazy dog."

    async def reply(params):
        chat = await connected(alice)
        await chat.send_json_to(send(text, params={**GREEDY, "max_tokens": 16, **params}))
        done, _ = await until(chat, "done")
        await chat.disconnect()
        return done["message"]

    plain = run(lambda: reply({"draft_model": "none"}))
    drafted = run(lambda: reply({"draft_model": "ngram", "num_draft_tokens": 4}))
    assert drafted["content"] == plain["content"]
    stats = drafted["stats"]
    assert stats["accepted_prediction_tokens"] + stats["rejected_prediction_tokens"] > 0
    assert plain["stats"]["accepted_prediction_tokens"] == 0
    saved = Message.objects.get(id=drafted["id"]).conversation
    assert saved.params["draft_model"] == "ngram" and saved.params["num_draft_tokens"] == 4


def test_a_turn_counts_in_the_users_usage_and_a_spent_budget_refuses_the_next(
    registered_models, alice
):
    """The lab's chat is a caller as an API key is: its usage recorded, its budget kept."""
    from access.models import UsageDay, UserLimits

    UserLimits.objects.create(user=alice, monthly_tokens=1)

    async def scenario():
        chat = await connected(alice)
        await chat.send_json_to(send("Name a colour."))
        done, before = await until(chat, "done")
        conversation = next(m for m in before if m["type"] == "conversation")["conversation"]
        for _ in range(50):  # the record is written once the tally is in
            if await UsageDay.objects.filter(caller=f"user:{alice.pk}").aexists():
                break
            await asyncio.sleep(0.1)
        await chat.send_json_to(send("And another?", conversation=conversation["id"]))
        refused = await chat.receive_json_from(timeout=60)
        await chat.disconnect()
        return done, refused

    done, refused = run(scenario)
    row = UsageDay.objects.get(caller=f"user:{alice.pk}")
    assert row.requests == 1 and row.user_id == alice.pk
    assert row.completion_tokens == done["message"]["stats"]["completion_tokens"]
    assert refused["type"] == "error" and "monthly token budget" in refused["message"]
