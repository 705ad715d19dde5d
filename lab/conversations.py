"""Saved conversations: the turns of a chat action, and what each action changes.

A chat action (send, regenerate, edit) is first worked out in memory as a `Turn`, so a
refused request (a bad parameter, an unknown model) changes nothing; `Turn.commit`
then writes it. A conversation is a tree of turns (lab/message_tree.py): an action
reads and extends its shown branch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction

from .chat_settings import ChatInputError, ChatSettings
from .message_attachments import (
    attachments_by_message,
    checked_parts,
    page_attachments,
    page_part,
    store_attachments,
    untitled,
    wire_content,
    wire_part,
    wire_turns,
)
from .message_tree import add_message, conversation_path, copy_lineage, versions_of
from .models import Conversation, Message
from .side_by_side import variant_of

TITLE_LENGTH = 60


def title_from(text: str, kinds: Iterable[str] = ()) -> str:
    """`kinds`: those of the message's attachments, which title a message of no text."""
    line = " ".join(text.split()) or untitled(kinds)
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"


def message_dict(
    message: Message, versions: list[int] | None = None, attachments: list[dict] | None = None
) -> dict:
    """A message for the page; `versions`: the ids of its turn's versions, its own among
    them (oldest first), from which the page draws "< 2 / 3 >"; `attachments`: its images
    and audio (message_attachments.page_attachments)."""
    versions = versions or [message.id]
    return {
        "id": message.id,
        "role": message.role,
        "content": message.content,
        "reasoning": message.reasoning,
        "stats": message.stats,
        "created_at": message.created_at.isoformat(),
        "parent": message.parent_id,
        "version": versions.index(message.id) + 1 if message.id in versions else 1,
        "versions": versions,
        "attachments": attachments or [],
    }


def conversation_summary(conversation: Conversation) -> dict:
    return {
        "id": conversation.id,
        "title": conversation.title,
        "model": conversation.model,
        "updated_at": conversation.updated_at.isoformat(),
        "side_by_side_run": conversation.side_by_side_run or None,
    }


def side_by_side_title(variant: str, prompt: str) -> str:
    """The variant, then the prompt cut as a chat's title is: the 2-4 conversations of a
    run share their prompt, and a title cut to fit the sidebar must still tell them apart
    (the sidebar shows the prompt once, as the run's heading, and each variant under it)."""
    return f"{' '.join(variant.split())[:100]} · {title_from(prompt)}"


@dataclass
class Turn:
    """What an action will do: the turns to generate from, and the message it adds.

    Nothing is deleted: regenerate and edit add a version beside the reply or the user
    message they replace (lab/message_tree.py), and `hides_after` tells the page which
    messages leave the shown branch (those after that id; None: all of them).
    """

    conversation: Conversation | None  # None: a new one, created on commit
    settings: ChatSettings
    turns: list[dict]
    user_text: str | None = None  # a new user message, after `parent`
    parent: Message | None = None  # the turn the new user message follows
    answers: Message | None = None  # regenerate: the user message the reply answers
    edited: Message | None = None  # edit: the user message the new one is a version of
    hides: bool = False  # regenerate and edit: the page hides what they replace
    hides_after: int | None = None
    side_by_side_run: str = ""  # a new conversation of a side-by-side run
    new_attachments: list[dict] = field(default_factory=list)  # the new user message's, checked

    def keep_attachments(self, messages: list[dict]) -> None:
        """Take the new user message's images and audio from the normalised messages sent
        to the model (the API parser's checked parts), to be stored on commit."""
        if self.user_text is not None:
            self.new_attachments = checked_parts(messages[-1]["content"])

    @transaction.atomic
    def commit(self, owner, model: str) -> tuple[Conversation, Message | None, Message]:
        """Write the action; returns the conversation, the new user message (None for a
        regenerate) and the message the reply will follow."""
        conversation = self.conversation or Conversation(owner=owner, title="New chat")
        conversation.model = model
        conversation.system_prompt = self.settings.system_prompt
        conversation.params = self.settings.saved()
        if self.conversation is None and self.user_text is not None:
            conversation.side_by_side_run = self.side_by_side_run
            conversation.title = (
                side_by_side_title(variant_of(conversation), self.user_text)
                if self.side_by_side_run
                else title_from(self.user_text, (p["type"] for p in self.new_attachments))
            )
        elif self.edited is not None and self._edits_the_title(conversation):
            conversation.title = title_from(self.user_text or "")
        conversation.save()
        if self.user_text is None:
            return conversation, None, self.answers
        user_message = add_message(
            conversation=conversation, parent=self.parent, role="user", content=self.user_text
        )
        store_attachments(user_message, self.new_attachments)
        return conversation, user_message, user_message

    def _edits_the_title(self, conversation: Conversation) -> bool:
        # The title follows the first user message, unless the user renamed it.
        first = next((t for t in self.turns if t["role"] == "user"), None)
        edits_first = first is not None and first is self.turns[-1]
        kinds = self.edited.attachments.values_list("kind", flat=True)
        return edits_first and conversation.title == title_from(self.edited.content, kinds)


def _owned(owner, conversation_id) -> Conversation:
    if not isinstance(conversation_id, int) or isinstance(conversation_id, bool):
        raise ChatInputError("conversation must be a conversation id")
    conversation = Conversation.objects.filter(owner=owner, id=conversation_id).first()
    if conversation is None:
        raise ChatInputError(f"no conversation {conversation_id} of yours")
    return conversation


def plan_send(
    owner,
    conversation_id,
    text: str,
    settings: ChatSettings,
    side_by_side_run: str = "",
    attachments: list[str] | None = None,
) -> Turn:
    """A user message after the shown branch's last turn (a new conversation for None);
    `attachments`: the data: URLs of the images and audio it carries."""
    parts = [page_part(url) for url in attachments or []]
    turn = [{"role": "user", "content": wire_content(text, parts)}]
    if conversation_id is None:
        return Turn(None, settings, turn, user_text=text, side_by_side_run=side_by_side_run)
    conversation = _owned(owner, conversation_id)
    path = conversation_path(conversation)
    parent = path[-1] if path else None
    return Turn(conversation, settings, wire_turns(path) + turn, user_text=text, parent=parent)


def plan_regenerate(owner, conversation_id, settings: ChatSettings) -> Turn:
    """A new version of the reply to the shown branch's last user message."""
    conversation = _owned(owner, conversation_id)
    path = conversation_path(conversation)
    while path and path[-1].role == "assistant":
        path.pop()
    if not path:
        raise ChatInputError("there is no user message to answer")
    answers = path[-1]
    return Turn(
        conversation,
        settings,
        wire_turns(path),
        answers=answers,
        hides=True,
        hides_after=answers.id,
    )


def plan_edit(owner, conversation_id, message_id, text: str, settings: ChatSettings) -> Turn:
    """A new version of a user message of the shown branch, with its images and audio; the
    edited one keeps its own branch."""
    conversation = _owned(owner, conversation_id)
    path = conversation_path(conversation)
    index = next((i for i, m in enumerate(path) if m.id == message_id), None)
    if index is None or path[index].role != "user":
        raise ChatInputError(f"no user message {message_id} in this conversation")
    edited = path[index]
    parts = [wire_part(a) for a in attachments_by_message([edited])[edited.id]]
    turns = wire_turns(path[:index]) + [{"role": "user", "content": wire_content(text, parts)}]
    return Turn(
        conversation, settings, turns, user_text=text, parent=path[index - 1] if index else None,
        edited=edited, hides=True, hides_after=edited.parent_id,
    )  # fmt: skip


def save_reply(
    conversation: Conversation, parent: Message, content: str, reasoning: str, stats: dict
) -> tuple[Message, list[int]]:
    """The reply, after the message it answers, as the shown version of its turn; and
    the ids of that turn's versions."""
    message = add_message(
        conversation=conversation, parent=parent, role="assistant",
        content=content, reasoning=reasoning, stats=stats,
    )  # fmt: skip
    conversation.save(update_fields=["updated_at"])
    return message, versions_of(message)


def new_user_message(message: Message) -> dict:
    """The websocket's user_message: the new message with its turn's versions."""
    return message_dict(message, versions_of(message), page_attachments([message])[message.id])


def branch(conversation: Conversation, message: Message) -> Conversation:
    """A new conversation holding copies of `message` and the turns before it."""
    copy = Conversation.objects.create(
        owner=conversation.owner,
        title=title_from(f"{conversation.title} (branch)"),
        model=conversation.model,
        system_prompt=conversation.system_prompt,
        params=conversation.params,
    )
    copy_lineage(message, copy)
    return copy
