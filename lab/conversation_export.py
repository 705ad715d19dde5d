"""A saved conversation as a file: Markdown to read, or JSON in OpenAI's chat shape
(`{"model", "messages"}`, a body POST /v1/chat/completions takes as it is). Either holds
the shown branch: the versions the page shows, as the model would read them. A user
message's images go in as data: URLs (OpenAI's image_url parts; Markdown image links), so
the file is whole without the lab."""

from __future__ import annotations

import json
import re

from .message_images import data_url, images_by_message, wire_content
from .message_tree import conversation_path
from .models import Conversation

FORMATS = {"markdown": ("md", "text/markdown; charset=utf-8"), "json": ("json", "application/json")}
ROLE_HEADINGS = {"user": "You", "assistant": "Assistant"}


def openai_messages(conversation: Conversation) -> list[dict]:
    """The system prompt (if any), then each turn as {"role", "content"}."""
    messages = []
    if conversation.system_prompt.strip():
        messages.append({"role": "system", "content": conversation.system_prompt})
    path = conversation_path(conversation)
    images = images_by_message(path)
    for message in path:
        urls = [data_url(image) for image in images[message.id]]
        messages.append({"role": message.role, "content": wire_content(message.content, urls)})
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
    images = images_by_message(path)
    for message in path:
        parts += [f"## {ROLE_HEADINGS.get(message.role, message.role)}", ""]
        if message.reasoning.strip():
            parts += ["<details><summary>Thinking</summary>", "", message.reasoning.strip()]
            parts += ["", "</details>", ""]
        links = [
            f"![Image {i + 1}]({data_url(image)})" for i, image in enumerate(images[message.id])
        ]
        text = message.content.strip() or ("" if links else "_(empty)_")
        for block in (text, " ".join(links)):
            parts += [block, ""] if block else []
    return "\n".join(parts)


def export(conversation: Conversation, kind: str) -> tuple[str, str, str]:
    """(text, content type, file name) of the conversation in `kind`, one of FORMATS."""
    extension, content_type = FORMATS[kind]
    text = as_markdown(conversation) if kind == "markdown" else as_json(conversation)
    stem = re.sub(r"[^A-Za-z0-9]+", "-", conversation.title).strip("-").lower()[:60]
    return text, content_type, f"{stem or 'conversation'}-{conversation.id}.{extension}"
