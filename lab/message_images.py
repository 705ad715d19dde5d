"""The images of user messages: kept, shown, sent again, and written out.

An image reaches the lab as the API's chat surface takes it, a `data:` URL in an OpenAI
`image_url` part, and is checked by that surface's parser (inference.chat.messages); the
lab stores the checked part's bytes, type and hash, and hands a stored image back to the
model as the same kind of part, so an image is only ever read one way.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterable

from django.db import transaction

from inference.protocol.media import IMAGE

from .models import Message, MessageImage

DATA_URL_PREFIX = "data:"


def data_url(image: MessageImage) -> str:
    return f"data:{image.mime};base64,{base64.b64encode(bytes(image.data)).decode('ascii')}"


def wire_content(text: str, urls: list[str]) -> str | list[dict]:
    """A user message's content as OpenAI chat carries it: the text alone, or its text
    part followed by one image_url part per image."""
    if not urls:
        return text
    parts = [{"type": "text", "text": text}] if text else []
    return parts + [{"type": "image_url", "image_url": {"url": url}} for url in urls]


def images_by_message(messages: Iterable[Message]) -> dict[int, list[MessageImage]]:
    """The images of these messages, bytes included, in one query."""
    found: dict[int, list[MessageImage]] = defaultdict(list)
    ids = [m.id for m in messages if m.role == "user"]
    for image in MessageImage.objects.filter(message_id__in=ids):
        found[image.message_id].append(image)
    return found


def wire_turns(messages: list[Message]) -> list[dict]:
    """The messages as chat turns, each user message with its images."""
    images = images_by_message(messages)
    return [
        {"role": m.role, "content": wire_content(m.content, [data_url(i) for i in images[m.id]])}
        for m in messages
    ]


def image_parts(content) -> list[dict]:
    """The checked image parts of a normalised message's content (inference.chat)."""
    if not isinstance(content, list):
        return []
    return [part for part in content if part.get("type") == IMAGE]


@transaction.atomic
def store_images(message: Message, parts: list[dict]) -> None:
    """Keep the checked image parts with the message, in their order."""
    MessageImage.objects.bulk_create(
        MessageImage(
            message=message, position=index, mime=part["mime"], sha256=part["sha256"],
            data=part["data"],
        )
        for index, part in enumerate(parts)
    )  # fmt: skip


def copy_images(source: Message, target: Message) -> None:
    """The source's images, kept with the target too (a branch's copy of a turn)."""
    MessageImage.objects.bulk_create(
        MessageImage(message=target, position=i.position, mime=i.mime, sha256=i.sha256, data=i.data)
        for i in source.images.all()
    )


def page_images(messages: Iterable[Message]) -> dict[int, list[dict]]:
    """The page's view of the messages' images, in one query that leaves their bytes:
    where each is (/api/messages/<id>/images/<n> serves it), its type and its hash."""
    found: dict[int, list[dict]] = defaultdict(list)
    ids = [m.id for m in messages if m.role == "user"]
    for image in MessageImage.objects.filter(message_id__in=ids).defer("data"):
        found[image.message_id].append(
            {
                "url": f"/api/messages/{image.message_id}/images/{image.position}",
                "mime": image.mime,
                "sha256": image.sha256,
            }
        )
    return found


def image_of(owner, message_id: int, position: int) -> MessageImage | None:
    return MessageImage.objects.filter(
        message_id=message_id, position=position, message__conversation__owner=owner
    ).first()
