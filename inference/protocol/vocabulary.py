"""Whether a draft model shares its target's vocabulary: the web side checks it when a
model's default draft is set, the worker when a request names a draft."""

from __future__ import annotations


def vocabulary_difference(
    target: dict[str, int], draft: dict[str, int], names: tuple[str, str] = ("target", "draft")
) -> str | None:
    """How two vocabularies differ, in words (the models called `names`); None when they
    are the same token -> id map."""
    if target == draft:
        return None
    only_target = target.keys() - draft.keys()
    only_draft = draft.keys() - target.keys()
    moved = sum(target[token] != draft[token] for token in target.keys() & draft.keys())
    first, second = names
    parts = [f"{first} has {len(target)} tokens, {second} {len(draft)}"]
    if only_target or only_draft:
        parts.append(f"{len(only_target)} only in {first}, {len(only_draft)} only in {second}")
    if moved:
        parts.append(f"{moved} with other ids")
    return "; ".join(parts)
