"""Lab conversations and stored /v1/responses chains, as dataset examples.

Both become chats first (a list of chat messages plus any tool definitions), then
examples of the chosen format; uploads are read in dataset_examples.
"""

from __future__ import annotations

from django.utils import timezone

from inference.api.responses_request import items_to_messages
from inference.models import StoredResponse
from inference.response_store import BrokenChain, response_chain
from lab.message_tree import shown_path
from lab.models import Conversation

from .context import JobParamsError

Chat = tuple[list[dict], list[dict] | None]  # messages, tools


def conversation_ids(selection, owner) -> list[int]:
    """The ids `selection` ("all" or a list) means, among the owner's conversations."""
    visible = Conversation.objects.all() if owner is None else owner.conversations.all()
    if selection == "all":
        return list(visible.order_by("id").values_list("id", flat=True))
    ids = _id_list(selection, "conversations", int)
    found = set(visible.filter(id__in=ids).values_list("id", flat=True))
    _check_found(ids, found, "conversations")
    return ids


EVERYONE = "everyone"  # every user's stored responses: a staff choice, said in the job


def response_ids(selection, owner) -> list[str]:
    """The ids `selection` means among the owner's stored responses, as conversations are
    the owner's own; "all" is each unexpired chain once, by its last response, and
    "everyone" the same over every caller's (staff only). No owner: every caller's."""
    live = StoredResponse.objects.filter(expires_at__gt=timezone.now())
    if selection == EVERYONE:
        if owner is not None and not owner.is_staff:
            raise JobParamsError("only staff may build a dataset from everyone's responses")
    elif owner is not None:
        live = live.filter(owner=f"user:{owner.pk}")  # who stored it (api/access.py caller_id)
    if selection in ("all", EVERYONE):
        # A response continued by another is only part of a longer chain.
        continued = live.filter(previous__isnull=False).values("previous_id")
        leaves = live.exclude(id__in=continued).order_by("created_at", "id")
        return list(leaves.values_list("id", flat=True))
    ids = _id_list(selection, "responses", str, words='"all", "everyone"')
    _check_found(ids, set(live.filter(id__in=ids).values_list("id", flat=True)), "responses")
    return ids


def _id_list(selection, name: str, kind: type, words: str = '"all"') -> list:
    if not isinstance(selection, list) or not selection:
        raise JobParamsError(f"source.{name} must be {words} or a non-empty list of ids")
    if not all(isinstance(i, kind) and not isinstance(i, bool) for i in selection):
        raise JobParamsError(f"source.{name} ids must be {kind.__name__}s")
    return list(dict.fromkeys(selection))  # drop repeats, keep order


def _check_found(ids: list, found: set, name: str) -> None:
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise JobParamsError(f"{name} not found: {', '.join(missing)}")


def conversation_chats(ids: list[int]) -> list[Chat]:
    """Each conversation as a chat: its system prompt, then the turns of its shown branch
    (the versions the chat page shows; the others would repeat turns)."""
    chats = []
    conversations = Conversation.objects.filter(id__in=ids).prefetch_related("messages")
    by_id = {conversation.id: conversation for conversation in conversations}
    for conversation_id in ids:
        conversation = by_id.get(conversation_id)
        if conversation is None:  # deleted since the job was validated
            continue
        messages = [{"role": "system", "content": conversation.system_prompt}]
        messages = messages if conversation.system_prompt else []
        messages += [
            {"role": m.role, "content": m.content}
            for m in shown_path(conversation.messages.all())
            if m.content.strip()  # a reply cut off before any text teaches nothing
        ]
        chats.append((messages, None))
    return chats


def response_chats(ids: list[str], with_tools: bool) -> list[Chat]:
    """Each response's chain, oldest first, as one chat; function calls only `with_tools`."""
    chats = []
    for response_id in ids:
        try:
            chain = response_chain(response_id=response_id, owner=None)
        except BrokenChain:  # an earlier turn is gone: never teach a conversation cut short
            continue
        if not chain:  # expired since the job was validated
            continue
        items = [item for r in chain for item in r.input_items + r.output_items]
        messages = _training_turns(items_to_messages(items, strict=False), with_tools)
        # The newest instructions are the ones the final answers were given under.
        instructions = next((r.instructions for r in reversed(chain) if r.instructions), "")
        if instructions:
            messages.insert(0, {"role": "system", "content": instructions})
        tools = _response_tools(chain[-1].body) if with_tools else None
        chats.append((messages, tools))
    return chats


def _training_turns(messages: list[dict], with_tools: bool) -> list[dict]:
    # Earlier reasoning stays out: mlx-lm hands these messages to the chat template as
    # they are, and templates know it only as reasoning_content. Tool turns go only where
    # the format carries the tools they call.
    return [
        {key: value for key, value in message.items() if key != "reasoning"}
        for message in messages
        if with_tools or not (message["role"] == "tool" or "tool_calls" in message)
    ]


def _response_tools(body: dict) -> list[dict] | None:
    # Responses tools are flat; chat templates expect {"type", "function": {...}}.
    tools = [
        {"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                          if k in t}}
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function" and t.get("name")
    ]  # fmt: skip
    return tools or None


def chat_examples(chat: Chat, fmt: str) -> list[dict]:
    """The examples one chat gives in `fmt`; none when it has no assistant reply."""
    messages, tools = chat
    # Ending on a reply: with --mask-prompt mlx-lm trains on the last message only.
    while messages and messages[-1]["role"] != "assistant":
        messages = messages[:-1]
    if not messages:
        return []
    if fmt == "completions":
        return [
            {"prompt": ask["content"], "completion": reply["content"]}
            for ask, reply in zip(messages, messages[1:], strict=False)
            if ask["role"] == "user" and reply["role"] == "assistant" and reply["content"]
        ]
    if fmt == "text":
        lines = [f"{m['role']}: {m['content']}" for m in messages if m["content"]]
        return [{"text": "\n".join(lines)}] if lines else []
    example = {"messages": messages}
    if fmt == "tools" and tools:
        example["tools"] = tools
    return [example]
