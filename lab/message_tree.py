"""A conversation as a tree of turns: each message follows its `parent`, the messages
that follow the same parent are the versions of one turn, and in each set of versions
one is `shown`. The shown path (from the first turn down through each shown version)
is what the chat page shows, what a reply is generated from and what is exported.

Regenerate adds a reply beside the one it replaces; an edit adds a user message beside
the edited one, which keeps the branch that followed it. Nothing is deleted by either.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from types import EllipsisType

from django.db import transaction

from .message_attachments import copy_attachments
from .models import Conversation, Message

# The parent given to add_message: a message, None (a first turn), or ... (the shown tip).
Parent = Message | None | EllipsisType


def children_of(messages: Iterable[Message]) -> dict[int | None, list[Message]]:
    """Each parent id (None for first turns) to its children, oldest first."""
    children: dict[int | None, list[Message]] = defaultdict(list)
    for message in sorted(messages, key=lambda m: m.id):
        children[message.parent_id].append(message)
    return children


def _chosen(versions: list[Message]) -> Message:
    # Exactly one is shown unless the shown one was deleted: then the newest stands in.
    return next((m for m in reversed(versions) if m.shown), versions[-1])


def shown_path(messages: Iterable[Message]) -> list[Message]:
    """The shown branch, first turn first."""
    children = children_of(messages)
    path: list[Message] = []
    parent: int | None = None
    while versions := children.get(parent):
        chosen = _chosen(versions)
        path.append(chosen)
        parent = chosen.id
    return path


def conversation_path(conversation: Conversation) -> list[Message]:
    return shown_path(conversation.messages.all())


def path_with_versions(conversation: Conversation) -> list[tuple[Message, list[int]]]:
    """The shown branch, each message with the ids of its turn's versions (its own among
    them, oldest first): one query for the whole tree."""
    children = children_of(conversation.messages.all())
    path = shown_path(m for versions in children.values() for m in versions)
    return [(m, [v.id for v in children[m.parent_id]]) for m in path]


def versions_of(message: Message) -> list[int]:
    return list(_siblings(message).values_list("id", flat=True))


def _siblings(message: Message):
    # parent_id=None reads as IS NULL: the first turns are versions of each other.
    return Message.objects.filter(
        conversation_id=message.conversation_id, parent_id=message.parent_id
    ).order_by("id")


@transaction.atomic
def add_message(*, conversation: Conversation, parent: Parent = ..., **fields) -> Message:
    """A new message after `parent` (`...`: after the shown path's last turn), made the
    shown version of its turn."""
    if parent is ...:
        path = conversation_path(conversation)
        parent = path[-1] if path else None
    message = Message(conversation=conversation, parent=parent, **{"shown": True, **fields})
    message.save()
    if message.shown:
        _siblings(message).exclude(id=message.id).update(shown=False)
    return message


@transaction.atomic
def show(message: Message) -> None:
    """Make `message` the shown version of its turn, and of each turn before it, so that
    it is on the shown path; the turns after it keep the versions they showed before."""
    for turn in lineage(message):
        _siblings(turn).exclude(id=turn.id).update(shown=False)
        Message.objects.filter(id=turn.id).update(shown=True)


def lineage(message: Message) -> list[Message]:
    """The message and the turns before it, first turn first."""
    chain = [message]
    while chain[-1].parent_id is not None:
        chain.append(Message.objects.get(id=chain[-1].parent_id))
    return chain[::-1]


@transaction.atomic
def delete_message(message: Message) -> None:
    """Delete a message. One of several versions goes with the branch that followed it
    (that branch belongs to it); an only version goes alone, the turns after it moving up
    one, as a conversation's message was deleted before turns had versions."""
    if not _siblings(message).exclude(id=message.id).exists():
        message.children.update(parent_id=message.parent_id)
    message.delete()


@transaction.atomic
def copy_lineage(message: Message, into: Conversation) -> None:
    """Copies of the message and the turns before it, as one branch of `into`."""
    parent = None
    for turn in lineage(message):
        parent = Message.objects.create(
            conversation=into, parent=parent, role=turn.role, content=turn.content,
            reasoning=turn.reasoning, stats=turn.stats,
        )  # fmt: skip
        copy_attachments(turn, parent)
