"""What a structured request's output must match, as the web side states it; the worker's
engine/grammar.py compiles it with xgrammar."""

from __future__ import annotations

import json
from dataclasses import dataclass

KINDS = ("json_schema", "json_object", "regex", "choice", "ebnf")


@dataclass(frozen=True)
class GrammarSpec:
    """What the output must match: `source` is a schema (JSON text), regex or EBNF."""

    kind: str
    source: str = ""
    # The words that ask the model for this format when no grammar can enforce it
    # (written from the request as sent: a schema's name, the choices as listed).
    instruction: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown grammar kind {self.kind!r}")


def choice_regex(choices: list[str]) -> str:
    """A regex matching exactly one of the strings."""
    escaped = ("".join("\\" + c if c in r"\.^$|?*+()[]{}/" else c for c in s) for s in choices)
    return "(" + "|".join(escaped) + ")"


def schema_text(schema: dict | str) -> str:
    # Property order is kept: the grammar makes the model write them in this order.
    return schema if isinstance(schema, str) else json.dumps(schema)
