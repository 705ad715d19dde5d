"""Whether one registered model can draft for another, judged from their folders alone:
the same token -> id map. The worker checks every request again (engine/prompt.py); this
lets the models page refuse a wrong default draft when it is set, not at the first chat."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from .protocol.vocabulary import vocabulary_difference


def folder_vocabulary(folder: str) -> dict[str, int] | None:
    """The folder's tokenizer.json vocabulary, added tokens included; None without one."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    return Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True)


def draft_problem(*, target, draft) -> str | None:
    """Why `draft` cannot draft for `target` (LanguageModel records), or None."""
    if draft.pk == target.pk:
        return f"{target.name} cannot be its own draft model"
    try:
        ours, theirs = folder_vocabulary(target.path), folder_vocabulary(draft.path)
    except Exception as exc:  # an unreadable tokenizer: the worker will say more
        return f"the vocabularies of {target.name} and {draft.name} cannot be read: {exc}"
    if ours is None or theirs is None:
        return None  # no tokenizer.json: left to the worker's check
    difference = vocabulary_difference(ours, theirs, (target.name, draft.name))
    if difference is None:
        return None
    return f"{draft.name} has another vocabulary than {target.name} ({difference})"
