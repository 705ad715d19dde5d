"""Images of chat messages in-process: checked by the API's chat parser, kept with the
message, served to its owner, sent again with the turns that follow, carried by edits,
branches and exports (lab/message_attachments.py). No model is needed: the turns are planned
and committed as the chat websocket does (lab/consumers.py)."""

from __future__ import annotations

import base64
import hashlib
import io

import pytest
from django.test import Client
from PIL import Image

from inference.errors import ApiError
from lab.chat_settings import ChatInputError, ChatSettings, chat_call
from lab.consumers import attached
from lab.conversation_export import as_markdown, openai_messages
from lab.conversations import branch, plan_edit, plan_regenerate, plan_send, save_reply
from lab.models import MessageAttachment

SETTINGS = ChatSettings(model="m", system_prompt="")


def png(colour: tuple[int, int, int], size: int = 8) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(out, format="PNG")
    return out.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


RED, BLUE = png((255, 0, 0)), png((0, 0, 255))


def commit(turn, owner):
    """The action planned as the websocket plans it, committed, and a reply saved."""
    call = chat_call(turn.settings, turn.turns)
    turn.keep_attachments(call.messages)
    conversation, user_message, parent = turn.commit(owner, "m")
    save_reply(conversation, parent, "A picture.", "", {"finish_reason": "stop"})
    return conversation, user_message


def image_urls(turn_content) -> list[str]:
    return [p["image_url"]["url"] for p in turn_content if p["type"] == "image_url"]


@pytest.fixture
def client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_images_are_kept_in_order_served_to_their_owner_and_shown(alice, client, django_user_model):
    chat, message = commit(plan_send(alice, None, "What is this?", SETTINGS, attachments=[data_url(RED), data_url(BLUE)]), alice)  # fmt: skip
    stored = list(message.attachments.all())
    assert [(i.position, i.mime, bytes(i.data)) for i in stored] == [
        (0, "image/png", RED),
        (1, "image/png", BLUE),
    ]
    assert stored[0].sha256 == hashlib.sha256(RED).hexdigest()

    shown = client.get(f"/api/conversations/{chat.id}").json()["messages"]
    urls = [attachment["url"] for attachment in shown[0]["attachments"]]
    assert urls == [
        f"/api/messages/{message.id}/attachments/0",
        f"/api/messages/{message.id}/attachments/1",
    ]
    assert {attachment["kind"] for attachment in shown[0]["attachments"]} == {"image"}
    assert shown[1]["attachments"] == []  # the reply
    answer = client.get(urls[1])
    assert answer.status_code == 200 and answer["Content-Type"] == "image/png"
    assert answer.content == BLUE
    assert client.get(f"/api/messages/{message.id}/attachments/2").status_code == 404
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob"))
    assert bob.get(urls[0]).status_code == 404  # not his


def test_a_message_of_images_alone_is_titled_for_them(alice):
    chat, message = commit(plan_send(alice, None, "", SETTINGS, attachments=[data_url(RED)]), alice)
    assert (chat.title, message.content, message.attachments.count()) == ("Image", "", 1)


def test_regenerate_edit_and_branch_send_the_images_again(alice):
    chat, message = commit(
        plan_send(alice, None, "What is this?", SETTINGS, attachments=[data_url(RED)]), alice
    )
    regenerate = plan_regenerate(alice, chat.id, SETTINGS)
    assert image_urls(regenerate.turns[0]["content"]) == [data_url(RED)]
    # The history's images go to the model with a later turn too.
    later = plan_send(alice, chat.id, "And now?", SETTINGS)
    assert image_urls(later.turns[0]["content"]) == [data_url(RED)]

    edit = plan_edit(alice, chat.id, message.id, "What colour is this?", SETTINGS)
    assert image_urls(edit.turns[-1]["content"]) == [data_url(RED)]
    _, edited = commit(edit, alice)
    assert [bytes(i.data) for i in edited.attachments.all()] == [RED]

    copy = branch(chat, edited)
    copied = copy.messages.get()
    assert [bytes(i.data) for i in copied.attachments.all()] == [RED]


def test_the_export_carries_the_images_as_data_urls(alice):
    chat, _ = commit(plan_send(alice, None, "What is this?", SETTINGS, attachments=[data_url(RED)]), alice)  # fmt: skip
    messages = openai_messages(chat)
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": data_url(RED)}},
        ],
    }
    # The export is a body the API takes as it is: its parser reads the image back.
    assert chat_call(SETTINGS, messages).messages[0]["content"][1]["data"] == RED
    assert f"![Image 1]({data_url(RED)})" in as_markdown(chat)


@pytest.mark.parametrize(
    "url, refusal",
    [
        (data_url(b"not an image at all"), "the data is not an image of a supported type"),
        (data_url(RED, "image/gif"), "images of type 'image/gif' are not supported"),
        ("data:image/png,rawbytes", "must be base64-encoded"),
    ],
)
def test_a_bad_image_is_refused_by_the_api_parser_and_nothing_is_kept(alice, url, refusal):
    turn = plan_send(alice, None, "What is this?", SETTINGS, attachments=[url])
    with pytest.raises(ApiError, match=refusal):
        chat_call(turn.settings, turn.turns)
    assert not MessageAttachment.objects.exists()


@pytest.mark.parametrize("value", ["data:image/png;base64,AA", ["https://example.com/a.png"], [3]])
def test_the_page_sends_files_never_an_address_to_fetch(value):
    with pytest.raises(ChatInputError, match="attachments must be a list of data: URLs"):
        attached(value)
