"""The images and audio clips of user messages: kept, shown, sent again, and written out.

An attachment reaches the lab as the API's chat surface takes it, an OpenAI `image_url`
part holding a `data:` URL or an `input_audio` part (base64 wav or mp3), and is checked by
that surface's parser (inference.chat.messages); the lab stores the checked part's bytes,
type and hash, and hands a stored one back to the model as the same kind of part, so a
file is only ever read one way. The page sends either kind as a `data:` URL (page_part).
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterable

from django.db import transaction

from inference.protocol.media import AUDIO, IMAGE

from .chat_settings import ChatInputError
from .models import Message, MessageAttachment

AUDIO_MIMES = {"wav": "audio/wav", "mp3": "audio/mpeg"}  # a checked clip's format, as served
AUDIO_FORMATS = {mime: audio_format for audio_format, mime in AUDIO_MIMES.items()}
UNTITLED = {IMAGE: "Image", AUDIO: "Audio"}  # a first message of attachments and no text


def data_url(attachment: MessageAttachment) -> str:
    return f"data:{attachment.mime};base64,{_base64(attachment)}"


def _base64(attachment: MessageAttachment) -> str:
    return base64.b64encode(bytes(attachment.data)).decode("ascii")


def wire_part(attachment: MessageAttachment) -> dict:
    """A stored attachment as the part an API client sends (the export's, the model's)."""
    if attachment.kind == AUDIO:
        audio = {"data": _base64(attachment), "format": AUDIO_FORMATS[attachment.mime]}
        return {"type": "input_audio", "input_audio": audio}
    return {"type": "image_url", "image_url": {"url": data_url(attachment)}}


def page_part(url: str) -> dict:
    """The part for a `data:` URL the page attached: an audio type's is OpenAI's
    input_audio (its format named by the type), any other's an image_url part, for the
    API's parser to check or refuse in its own words."""
    header, _, payload = url.partition(",")
    mime = header[len("data:") :].split(";")[0].strip().lower()
    if not mime.startswith("audio/"):
        return {"type": "image_url", "image_url": {"url": url}}
    if not header.lower().endswith(";base64"):
        raise ChatInputError("an audio data: URL must be base64-encoded")
    audio_format = AUDIO_FORMATS.get(mime, mime.removeprefix("audio/"))
    return {"type": "input_audio", "input_audio": {"data": payload, "format": audio_format}}


def wire_content(text: str, parts: list[dict]) -> str | list[dict]:
    """A user message's content as OpenAI chat carries it: the text alone, or its text
    part followed by its attachments' parts (wire_part, page_part)."""
    if not parts:
        return text
    return ([{"type": "text", "text": text}] if text else []) + parts


def attachments_by_message(messages: Iterable[Message]) -> dict[int, list[MessageAttachment]]:
    """The attachments of these messages, bytes included, in one query."""
    found: dict[int, list[MessageAttachment]] = defaultdict(list)
    ids = [m.id for m in messages if m.role == "user"]
    for attachment in MessageAttachment.objects.filter(message_id__in=ids):
        found[attachment.message_id].append(attachment)
    return found


def wire_turns(messages: list[Message]) -> list[dict]:
    """The messages as chat turns, each user message with its attachments."""
    attachments = attachments_by_message(messages)
    turns = []
    for message in messages:
        parts = [wire_part(attachment) for attachment in attachments[message.id]]
        turns.append({"role": message.role, "content": wire_content(message.content, parts)})
    return turns


def checked_parts(content) -> list[dict]:
    """The checked image and audio parts of a normalised message's content (inference.chat)."""
    if not isinstance(content, list):
        return []
    return [part for part in content if part.get("type") in (IMAGE, AUDIO)]


def untitled(kinds: Iterable[str]) -> str:
    """A title for a message of attachments and no text: "Image", "Audio" or both."""
    kinds = set(kinds)
    words = [UNTITLED[kind] for kind in (IMAGE, AUDIO) if kind in kinds]
    return " and ".join(words).capitalize() or UNTITLED[IMAGE]


def _mime(part: dict) -> str:
    return AUDIO_MIMES[part["format"]] if part["type"] == AUDIO else part["mime"]


@transaction.atomic
def store_attachments(message: Message, parts: list[dict]) -> None:
    """Keep the checked parts with the message, in their order."""
    MessageAttachment.objects.bulk_create(
        MessageAttachment(
            message=message, position=index, kind=part["type"], mime=_mime(part),
            sha256=part["sha256"], data=part["data"],
        )
        for index, part in enumerate(parts)
    )  # fmt: skip


def copy_attachments(source: Message, target: Message) -> None:
    """The source's attachments, kept with the target too (a branch's copy of a turn)."""
    MessageAttachment.objects.bulk_create(
        MessageAttachment(
            message=target, position=a.position, kind=a.kind, mime=a.mime, sha256=a.sha256,
            data=a.data,
        )
        for a in source.attachments.all()
    )  # fmt: skip


def page_attachments(messages: Iterable[Message]) -> dict[int, list[dict]]:
    """The page's view of the messages' attachments, in one query that leaves their bytes:
    where each is (/api/messages/<id>/attachments/<n> serves it), its kind, type and hash."""
    found: dict[int, list[dict]] = defaultdict(list)
    ids = [m.id for m in messages if m.role == "user"]
    for attachment in MessageAttachment.objects.filter(message_id__in=ids).defer("data"):
        found[attachment.message_id].append(
            {
                "url": f"/api/messages/{attachment.message_id}/attachments/{attachment.position}",
                "kind": attachment.kind,
                "mime": attachment.mime,
                "sha256": attachment.sha256,
            }
        )
    return found


def attachment_of(owner, message_id: int, position: int) -> MessageAttachment | None:
    return MessageAttachment.objects.filter(
        message_id=message_id, position=position, message__conversation__owner=owner
    ).first()
