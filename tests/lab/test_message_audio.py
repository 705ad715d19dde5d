"""Audio clips of chat messages in-process, kept as images are (lab/message_attachments.py):
sent by the page as data: URLs, made OpenAI input_audio parts and checked by the API's chat
parser, kept with the message beside its images in their order, served to its owner, sent
again with later turns, carried by edits, branches and exports. No model is needed."""

from __future__ import annotations

import base64
import hashlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from inference.errors import ApiError
from lab.chat_settings import ChatInputError, chat_call
from lab.conversation_export import as_markdown, openai_messages
from lab.conversations import branch, plan_edit, plan_regenerate, plan_send
from lab.models import MessageAttachment
from tests.audio_models import wav
from tests.lab.test_message_images import RED, SETTINGS, commit, data_url

CLIP = wav(0.25, seed=3)


def audio_url(data: bytes = CLIP, mime: str = "audio/wav") -> str:
    return data_url(data, mime)


def input_audio(data: bytes = CLIP, audio_format: str = "wav") -> dict:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_audio", "input_audio": {"data": encoded, "format": audio_format}}


def media(turn_content) -> list[dict]:
    return [part for part in turn_content if part["type"] != "text"]


@pytest.fixture
def client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_a_clip_is_kept_beside_images_in_order_served_to_its_owner_and_shown(
    alice, client, django_user_model
):
    attachments = [data_url(RED), audio_url()]
    chat, message = commit(plan_send(alice, None, "Hear this", SETTINGS, attachments=attachments), alice)  # fmt: skip
    stored = list(message.attachments.all())
    assert [(a.position, a.kind, a.mime) for a in stored] == [
        (0, "image", "image/png"),
        (1, "audio", "audio/wav"),
    ]
    assert bytes(stored[1].data) == CLIP
    assert stored[1].sha256 == hashlib.sha256(CLIP).hexdigest()

    shown = client.get(f"/api/conversations/{chat.id}").json()["messages"][0]["attachments"]
    assert [(a["kind"], a["mime"]) for a in shown] == [("image", "image/png"), ("audio", "audio/wav")]  # fmt: skip
    answer = client.get(shown[1]["url"])
    assert answer.status_code == 200 and answer["Content-Type"] == "audio/wav"
    assert answer.content == CLIP
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob"))
    assert bob.get(shown[1]["url"]).status_code == 404  # not his


def test_a_message_of_audio_alone_is_titled_for_it(alice):
    chat, message = commit(plan_send(alice, None, "", SETTINGS, attachments=[audio_url()]), alice)
    assert (chat.title, message.content, message.attachments.count()) == ("Audio", "", 1)
    both = plan_send(alice, None, " ", SETTINGS, attachments=[audio_url(), data_url(RED)])
    assert commit(both, alice)[0].title == "Image and audio"


def test_later_turns_regenerate_edit_and_branch_send_the_clip_again(alice):
    chat, message = commit(plan_send(alice, None, "Hear this", SETTINGS, attachments=[audio_url()]), alice)  # fmt: skip
    assert media(plan_regenerate(alice, chat.id, SETTINGS).turns[0]["content"]) == [input_audio()]
    assert media(plan_send(alice, chat.id, "Again?", SETTINGS).turns[0]["content"]) == [input_audio()]  # fmt: skip

    edit = plan_edit(alice, chat.id, message.id, "What is this sound?", SETTINGS)
    assert media(edit.turns[-1]["content"]) == [input_audio()]
    _, edited = commit(edit, alice)
    assert [(a.kind, bytes(a.data)) for a in edited.attachments.all()] == [("audio", CLIP)]

    copied = branch(chat, edited).messages.get()
    assert [(a.kind, a.mime, bytes(a.data)) for a in copied.attachments.all()] == [
        ("audio", "audio/wav", CLIP)
    ]


def test_the_export_carries_the_clip_as_input_audio(alice):
    attachments = [data_url(RED), audio_url()]
    chat, _ = commit(plan_send(alice, None, "Hear this", SETTINGS, attachments=attachments), alice)  # fmt: skip
    messages = openai_messages(chat)
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Hear this"},
            {"type": "image_url", "image_url": {"url": data_url(RED)}},
            input_audio(),
        ],
    }
    # A body the API takes as it is: its parser reads the clip back.
    parsed = chat_call(SETTINGS, messages).messages[0]["content"][2]
    assert (parsed["type"], parsed["format"], parsed["data"]) == ("audio", "wav", CLIP)
    markdown = as_markdown(chat)
    assert f"![Image 1]({data_url(RED)})" in markdown
    assert f"[Audio 1 (wav)]({audio_url()})" in markdown


@pytest.mark.parametrize(
    "url, refusal",
    [
        (audio_url(b"RIFF....WAVEnot really"), "the wav audio cannot be decoded"),
        (audio_url(RED, "audio/mpeg"), "the data is not mp3 audio"),
        (audio_url(CLIP, "audio/ogg"), "format must be one of wav, mp3"),
        (audio_url(wav(301, frequency=100.0, rate=1000)), "MLXLAB_MAX_AUDIO_SECONDS"),
    ],
)
def test_a_bad_clip_is_refused_by_the_api_parser_and_nothing_is_kept(alice, url, refusal):
    turn = plan_send(alice, None, "Hear this", SETTINGS, attachments=[url])
    with pytest.raises(ApiError, match=refusal):
        chat_call(turn.settings, turn.turns)
    assert not MessageAttachment.objects.exists()


def test_an_audio_data_url_must_be_base64(alice):
    with pytest.raises(ChatInputError, match="an audio data: URL must be base64-encoded"):
        plan_send(alice, None, "Hear this", SETTINGS, attachments=["data:audio/wav,RIFF"])


BEFORE = [("lab", "0005_message_images")]
ALSO_USED = [("auth", "0012_alter_user_first_name_max_length")]


@pytest.mark.django_db(transaction=True)
def test_the_images_stored_before_audio_become_image_attachments():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE + ALSO_USED).apps
        owner = old.get_model("auth", "User").objects.create(username="early")
        chat = old.get_model("lab", "Conversation").objects.create(owner_id=owner.pk)
        message = old.get_model("lab", "Message").objects.create(
            conversation_id=chat.pk, role="user", content="What is this?"
        )
        old.get_model("lab", "MessageImage").objects.create(
            message_id=message.pk, position=0, mime="image/png", sha256="0" * 64, data=RED
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    kept = MessageAttachment.objects.get()
    assert (kept.message_id, kept.kind, kept.mime, bytes(kept.data)) == (message.pk, "image", "image/png", RED)  # fmt: skip
