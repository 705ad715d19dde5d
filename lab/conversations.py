"""Saved conversations: the turns of a chat action, and what each action changes.

A chat action (send, regenerate, edit) is first worked out in memory as a `Turn`, so a
refused request (a bad parameter, an unknown model) changes nothing; `Turn.commit`
then writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from .chat_settings import ChatInputError, ChatSettings
from .models import Conversation, Message

TITLE_LENGTH = 60


def title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"


def message_dict(message: Message) -> dict:
    return {
        "id": message.id,
        "role": message.role,
        "content": message.content,
        "reasoning": message.reasoning,
        "stats": message.stats,
        "created_at": message.created_at.isoformat(),
    }


def conversation_summary(conversation: Conversation) -> dict:
    return {
        "id": conversation.id,
        "title": conversation.title,
        "model": conversation.model,
        "updated_at": conversation.updated_at.isoformat(),
    }


@dataclass
class Turn:
    """What an action will do: the conversation's turns to generate from, and the edits."""

    conversation: Conversation | None  # None: a new one, created on commit
    settings: ChatSettings
    turns: list[dict]
    user_text: str | None = None  # a new user message to append
    edit: Message | None = None  # a user message whose text changes
    drop_after: int | None = None  # remove the messages after this id (0: all)

    @transaction.atomic
    def commit(self, owner, model: str) -> tuple[Conversation, Message | None]:
        """Write the action; returns the conversation and the new or edited user message."""
        conversation = self.conversation or Conversation(owner=owner, title="New chat")
        if self.conversation is None and self.user_text:
            conversation.title = title_from(self.user_text)
        conversation.model = model
        conversation.system_prompt = self.settings.system_prompt
        conversation.params = self.settings.saved()
        conversation.save()
        if self.drop_after is not None:
            conversation.messages.filter(id__gt=self.drop_after).delete()
        user_message = self.edit
        if self.edit is not None:
            self.edit.save(update_fields=["content"])
        if self.user_text is not None:
            user_message = conversation.messages.create(role="user", content=self.user_text)
        return conversation, user_message


def _turns(messages) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in messages]


def _owned(owner, conversation_id) -> Conversation:
    if not isinstance(conversation_id, int) or isinstance(conversation_id, bool):
        raise ChatInputError("conversation must be a conversation id")
    conversation = Conversation.objects.filter(owner=owner, id=conversation_id).first()
    if conversation is None:
        raise ChatInputError(f"no conversation {conversation_id} of yours")
    return conversation


def plan_send(owner, conversation_id, text: str, settings: ChatSettings) -> Turn:
    if conversation_id is None:
        return Turn(None, settings, [{"role": "user", "content": text}], user_text=text)
    conversation = _owned(owner, conversation_id)
    turns = _turns(conversation.messages.all()) + [{"role": "user", "content": text}]
    return Turn(conversation, settings, turns, user_text=text)


def plan_regenerate(owner, conversation_id, settings: ChatSettings) -> Turn:
    conversation = _owned(owner, conversation_id)
    messages = list(conversation.messages.all())
    while messages and messages[-1].role == "assistant":
        messages.pop()
    if not messages:
        raise ChatInputError("there is no user message to answer")
    return Turn(conversation, settings, _turns(messages), drop_after=messages[-1].id)


def plan_edit(owner, conversation_id, message_id, text: str, settings: ChatSettings) -> Turn:
    conversation = _owned(owner, conversation_id)
    messages = list(conversation.messages.all())
    index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
    if index is None or messages[index].role != "user":
        raise ChatInputError(f"no user message {message_id} in this conversation")
    edited = messages[index]
    edited.content = text
    return Turn(
        conversation, settings, _turns(messages[: index + 1]), edit=edited, drop_after=edited.id
    )


def save_reply(conversation: Conversation, content: str, reasoning: str, stats: dict) -> Message:
    message = conversation.messages.create(
        role="assistant", content=content, reasoning=reasoning, stats=stats
    )
    conversation.save(update_fields=["updated_at"])
    return message


@transaction.atomic
def branch(conversation: Conversation, message: Message) -> Conversation:
    """A new conversation holding copies of the messages up to and including `message`."""
    copy = Conversation.objects.create(
        owner=conversation.owner,
        title=title_from(f"{conversation.title} (branch)"),
        model=conversation.model,
        system_prompt=conversation.system_prompt,
        params=conversation.params,
    )
    Message.objects.bulk_create(
        Message(
            conversation=copy,
            role=m.role,
            content=m.content,
            reasoning=m.reasoning,
            stats=m.stats,
        )
        for m in conversation.messages.filter(id__lte=message.id)
    )
    return copy
