"""Reply versions in-process: a conversation is a tree of turns whose shown branch the
page shows, generates from and exports (lab/message_tree.py); no model is needed, the
replies are saved as the chat websocket saves them."""

from __future__ import annotations

from importlib import import_module

import pytest
from django.apps import apps
from django.test import Client

from lab.chat_settings import ChatSettings
from lab.conversation_export import openai_messages
from lab.conversations import plan_edit, plan_regenerate, plan_send, save_reply
from lab.message_tree import conversation_path, show
from lab.models import Conversation, Message
from lab.side_by_side import pair_counts, record_vote

SETTINGS = ChatSettings(model="m", system_prompt="")


def contents(conversation: Conversation) -> list[str]:
    return [m.content for m in conversation_path(conversation)]


def reply_to(turn, owner, text: str):
    """A planned action committed, and its reply saved after the message it answers."""
    conversation, _, parent = turn.commit(owner, "m")
    reply, _ = save_reply(conversation, parent, text, "", {"finish_reason": "stop"})
    return conversation, reply


@pytest.fixture
def client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_versions_switch_persist_and_the_conversation_goes_on_from_the_shown_one(alice, client):
    chat, first = reply_to(plan_send(alice, None, "Hello", SETTINGS), alice, "Hi 1")
    _, second = reply_to(plan_regenerate(alice, chat.id, SETTINGS), alice, "Hi 2")
    regenerate = plan_regenerate(alice, chat.id, SETTINGS)
    assert regenerate.turns == [{"role": "user", "content": "Hello"}]  # no reply in the prompt
    _, third = reply_to(regenerate, alice, "Hi 3")
    assert contents(chat) == ["Hello", "Hi 3"]  # the newest is shown

    answer = client.post(f"/api/conversations/{chat.id}/show", {"message": second.id},
                         content_type="application/json")  # fmt: skip
    assert answer.status_code == 200
    shown = answer.json()["messages"][-1]
    assert (shown["content"], shown["version"]) == ("Hi 2", 2)
    assert shown["versions"] == [first.id, second.id, third.id]
    assert client.get(f"/api/conversations/{chat.id}").json()["messages"][-1]["id"] == second.id

    send = plan_send(alice, chat.id, "And then?", SETTINGS)
    assert [t["content"] for t in send.turns] == ["Hello", "Hi 2", "And then?"]
    reply_to(send, alice, "Then this.")
    show(third)
    assert contents(chat) == ["Hello", "Hi 3"]
    show(second)  # the branch under a version is where it was left
    assert contents(chat) == ["Hello", "Hi 2", "And then?", "Then this."]
    assert [m["content"] for m in openai_messages(chat)] == contents(chat)  # export: the branch


def test_an_edit_keeps_the_message_and_its_branch_and_the_title_follows(alice, client):
    chat, _ = reply_to(plan_send(alice, None, "Capital of France?", SETTINGS), alice, "Paris.")
    original = chat.messages.get(content="Capital of France?")
    reply_to(plan_send(alice, chat.id, "And Italy?", SETTINGS), alice, "Rome.")
    edit = plan_edit(alice, chat.id, original.id, "Capital of Spain?", SETTINGS)
    assert (edit.hides, edit.hides_after) == (True, None)  # the page hides from the start
    chat, _ = reply_to(edit, alice, "Madrid.")
    assert contents(chat) == ["Capital of Spain?", "Madrid."]
    assert chat.title == "Capital of Spain?"
    messages = client.get(f"/api/conversations/{chat.id}").json()["messages"]
    assert messages[0]["versions"][0] == original.id and messages[0]["version"] == 2
    assert client.get("/api/conversations?q=Spain").json()["results"][0]["id"] == chat.id

    show(original)
    assert contents(chat) == ["Capital of France?", "Paris.", "And Italy?", "Rome."]
    italy = chat.messages.get(content="And Italy?")
    reply_to(plan_edit(alice, chat.id, italy.id, "And Peru?", SETTINGS), alice, "Lima.")
    chat.refresh_from_db()
    assert chat.title == "Capital of Spain?"  # a later message's edit leaves the title alone
    assert contents(chat) == ["Capital of France?", "Paris.", "And Peru?", "Lima."]


def test_delete_takes_a_version_with_its_branch_or_an_only_version_alone(alice, client):
    chat, first = reply_to(plan_send(alice, None, "Hello", SETTINGS), alice, "Hi 1")
    _, second = reply_to(plan_regenerate(alice, chat.id, SETTINGS), alice, "Hi 2")
    reply_to(plan_send(alice, chat.id, "More", SETTINGS), alice, "Sure.")
    assert client.delete(f"/api/messages/{second.id}").status_code == 204
    assert contents(chat) == ["Hello", "Hi 1"]  # its branch went with it
    assert not chat.messages.filter(content__in=["More", "Sure."]).exists()
    reply_to(plan_send(alice, chat.id, "Again", SETTINGS), alice, "Yes.")
    assert client.delete(f"/api/messages/{first.id}").status_code == 204
    assert contents(chat) == ["Hello", "Again", "Yes."]  # the turns after it moved up


def test_old_rows_become_one_branch_and_carry_on(alice, client):
    chat = Conversation.objects.create(owner=alice, title="Old")
    for role, content in [("user", "Q1"), ("assistant", "A1"), ("user", "Q2"), ("assistant", "A2")]:
        chat.messages.create(role=role, content=content, parent=None)  # as rows were before
    Conversation.objects.create(owner=alice).messages.create(role="user", content="Alone")
    import_module("lab.migrations.0004_link_existing_turns").link_turns(apps, None)
    assert contents(chat) == ["Q1", "A1", "Q2", "A2"]
    detail = client.get(f"/api/conversations/{chat.id}").json()
    assert all(m["versions"] == [m["id"]] for m in detail["messages"])
    regenerate = plan_regenerate(alice, chat.id, SETTINGS)
    assert [t["content"] for t in regenerate.turns] == ["Q1", "A1", "Q2"]
    reply_to(regenerate, alice, "A2 again")
    assert contents(chat) == ["Q1", "A1", "Q2", "A2 again"]


def test_side_by_side_runs_are_told_apart_listed_apart_and_may_tie(alice, client):
    prompt = "Name a prime number between ten and twenty, please, with a reason for it"
    columns = []
    for model in ("model-a", "model-a-4bit"):
        turn = plan_send(alice, None, prompt, SETTINGS, side_by_side_run="sbs-1")
        conversation, parent = turn.commit(alice, model)[::2]
        save_reply(conversation, parent, "13", "", {})
        columns.append(conversation)
    titles = [c.title for c in columns]
    assert titles[0].startswith("model-a · Name a prime") and len(set(titles)) == 2
    plain = Conversation.objects.create(owner=alice, title="A chat")
    listed = client.get("/api/conversations?kind=side_by_side").json()["results"]
    assert {c["id"] for c in listed} == {c.id for c in columns}
    assert {c["side_by_side_run"] for c in listed} == {"sbs-1"}
    chats = client.get("/api/conversations?kind=chat").json()["results"]
    assert [c["id"] for c in chats] == [plain.id]
    assert client.get("/api/conversations?kind=other").status_code == 400

    vote = record_vote(alice, [c.id for c in columns], None)
    assert vote.winner is None and str(vote).startswith("a tie")
    record_vote(alice, [c.id for c in columns], 1)
    (count,) = pair_counts(["model-a", "model-a-4bit"])
    assert (count["votes"], count["wins"], count["ties"]) == (2, (0, 1), 1)


def test_show_needs_a_message_of_that_conversation(alice, client):
    chat, reply = reply_to(plan_send(alice, None, "Hi", SETTINGS), alice, "Hello")
    other, _ = reply_to(plan_send(alice, None, "Yo", SETTINGS), alice, "Hey")
    for body in ({"message": other.messages.first().id}, {"message": "1"}, {}):
        answer = client.post(f"/api/conversations/{chat.id}/show", body,
                             content_type="application/json")  # fmt: skip
        assert answer.status_code == 400, body
    assert Message.objects.filter(conversation=chat).count() == 2
