"""A saved conversation as a file: Markdown to read, or JSON in OpenAI's chat shape
(`{"model", "messages"}`, a body POST /v1/chat/completions takes as it is). Either holds
the shown branch: the versions the page shows, as the model would read them. A user
message's images and audio go in whole: in JSON as OpenAI's image_url parts (data: URLs)
and input_audio parts (base64), in Markdown as links to data: URLs (an image shown, a clip
named with its format), so the file stands without the lab."""

from __future__ import annotations

import json
import re

from inference.protocol.media import AUDIO

from .message_attachments import (
    AUDIO_FORMATS,
    attachments_by_message,
    data_url,
    wire_content,
    wire_part,
)
from .message_tree import conversation_path
from .models import Conversation, MessageAttachment

FORMATS = {"markdown": ("md", "text/markdown; charset=utf-8"), "json": ("json", "application/json")}
ROLE_HEADINGS = {"user": "You", "assistant": "Assistant"}


def openai_messages(conversation: Conversation) -> list[dict]:
    """The system prompt (if any), then each turn as {"role", "content"}."""
    messages = []
    if conversation.system_prompt.strip():
        messages.append({"role": "system", "content": conversation.system_prompt})
    path = conversation_path(conversation)
    attachments = attachments_by_message(path)
    for message in path:
        parts = [wire_part(attachment) for attachment in attachments[message.id]]
        messages.append({"role": message.role, "content": wire_content(message.content, parts)})
    return messages


def as_json(conversation: Conversation) -> str:
    body = {"model": conversation.model, "messages": openai_messages(conversation)}
    return json.dumps(body, ensure_ascii=False, indent=2) + "\n"


def as_markdown(conversation: Conversation) -> str:
    parts = [f"# {conversation.title}", ""]
    if conversation.model:
        parts += [f"Model: `{conversation.model}`", ""]
    if conversation.system_prompt.strip():
        parts += ["## System", "", conversation.system_prompt.strip(), ""]
    path = conversation_path(conversation)
    attachments = attachments_by_message(path)
    for message in path:
        parts += [f"## {ROLE_HEADINGS.get(message.role, message.role)}", ""]
        if message.reasoning.strip():
            parts += ["<details><summary>Thinking</summary>", "", message.reasoning.strip()]
            parts += ["", "</details>", ""]
        links = markdown_links(attachments[message.id])
        text = message.content.strip() or ("" if links else "_(empty)_")
        for block in (text, " ".join(links)):
            parts += [block, ""] if block else []
    return "\n".join(parts)


def markdown_links(attachments: list[MessageAttachment]) -> list[str]:
    """An image as Markdown shows one; a clip, which Markdown cannot play, as a link named
    with its format. Each kind counted on its own: "Image 2", "Audio 1"."""
    links, counts = [], {}
    for attachment in attachments:
        number = counts[attachment.kind] = counts.get(attachment.kind, 0) + 1
        if attachment.kind == AUDIO:
            name = f"Audio {number} ({AUDIO_FORMATS[attachment.mime]})"
            links.append(f"[{name}]({data_url(attachment)})")
        else:
            links.append(f"![Image {number}]({data_url(attachment)})")
    return links


def export(conversation: Conversation, kind: str) -> tuple[str, str, str]:
    """(text, content type, file name) of the conversation in `kind`, one of FORMATS."""
    extension, content_type = FORMATS[kind]
    text = as_markdown(conversation) if kind == "markdown" else as_json(conversation)
    stem = re.sub(r"[^A-Za-z0-9]+", "-", conversation.title).strip("-").lower()[:60]
    return text, content_type, f"{stem or 'conversation'}-{conversation.id}.{extension}"
