"""Side-by-side votes: 2-4 conversations that answered one prompt, each with another
variant, and the reply the user found better; counted per pair of variants."""

from __future__ import annotations

from itertools import combinations

from django.db import transaction

from .chat_settings import ChatInputError
from .message_tree import conversation_path
from .models import Conversation, SideBySide

MIN_COLUMNS, MAX_COLUMNS = 2, 4


def variant_of(conversation: Conversation) -> str:
    """The variant that answered, labelled as the comparison page labels it."""
    adapter = (conversation.params or {}).get("adapter")
    named = adapter if isinstance(adapter, str) and adapter not in ("", "none") else None
    return f"{conversation.model} + {named}" if named else conversation.model


@transaction.atomic
def record_vote(owner, conversation_ids, winner) -> SideBySide:
    """Keep the vote with its conversations (`winner` None: a tie); ChatInputError says
    what will not do."""
    conversations = _columns(owner, conversation_ids)
    if winner is not None and (isinstance(winner, bool) or not isinstance(winner, int)):
        raise ChatInputError("winner must be the index of the better reply, or null for a tie")
    if winner is not None and not 0 <= winner < len(conversations):
        raise ChatInputError(f"winner must be between 0 and {len(conversations) - 1}")
    prompts = {_prompt_and_reply(conversation) for conversation in conversations}
    if len(prompts) != 1:
        raise ChatInputError("the conversations must answer the same prompt")
    vote = SideBySide.objects.create(
        owner=owner, prompt=prompts.pop(), winner=winner,
        variants=[variant_of(c) for c in conversations], conversation_ids=conversation_ids,
    )  # fmt: skip
    vote.conversations.set(conversations)
    return vote


def _columns(owner, conversation_ids) -> list[Conversation]:
    if (
        not isinstance(conversation_ids, list)
        or not MIN_COLUMNS <= len(conversation_ids) <= MAX_COLUMNS
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in conversation_ids)
        or len(set(conversation_ids)) != len(conversation_ids)
    ):
        raise ChatInputError(
            f"conversations must be {MIN_COLUMNS} to {MAX_COLUMNS} distinct conversation ids"
        )
    found = Conversation.objects.filter(owner=owner, id__in=conversation_ids).in_bulk()
    missing = [i for i in conversation_ids if i not in found]
    if missing:
        raise ChatInputError(f"no conversation {missing[0]} of yours")
    return [found[i] for i in conversation_ids]


def _prompt_and_reply(conversation: Conversation) -> str:
    # The shown branch: a column regenerated in the chat page still answers its prompt.
    path = conversation_path(conversation)
    if [m.role for m in path] != ["user", "assistant"]:
        raise ChatInputError(f"conversation {conversation.id} is not one prompt and its reply")
    return path[0].content


def vote_dict(vote: SideBySide) -> dict:
    return {
        "id": vote.id, "prompt": vote.prompt, "variants": vote.variants,
        "conversations": vote.conversation_ids, "winner": vote.winner,
        "created_at": vote.created_at.isoformat(),
    }  # fmt: skip


def pair_counts(labels: list[str]) -> list[dict]:
    """For each pair of these variants: how often each won a vote they were both in (a
    tie counts as a vote that neither won)."""
    votes = list(SideBySide.objects.values_list("variants", "winner"))
    counts = []
    for first, second in combinations(dict.fromkeys(labels), 2):
        together = [(variants, winner) for variants, winner in votes
                    if first in variants and second in variants]  # fmt: skip
        wins = [variants[winner] for variants, winner in together if winner is not None]
        counts.append({
            "pair": (first, second), "votes": len(together),
            "wins": (wins.count(first), wins.count(second)),
            "ties": len(together) - len(wins),
        })  # fmt: skip
    return counts
