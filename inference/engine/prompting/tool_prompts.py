"""What a chat's tools add to its prompt: the grammar of a forced call, and, for a template
that ignores tools, their description in words (in a system message)."""

from __future__ import annotations

import json

from ...protocol.grammar import GrammarSpec, schema_text


def with_system(messages: list[dict], instruction: str) -> list[dict]:
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def forced_call_grammar(tools: list[dict], choice: str) -> GrammarSpec:
    """The JSON of one call, {"name", "arguments"}, with each function's own schema."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                "arguments": tool["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
        if choice in ("required", tool["function"]["name"])
    ]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return GrammarSpec("json_schema", schema_text(schema))


def tools_instruction(tools: list[dict], markers: tuple[str, str]) -> str:
    """For templates that ignore `tools`: describe them and the call format in words."""
    start, end = markers
    listing = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
    return (
        "You can call these functions:\n"
        f"{listing}\n"
        f'To call one, reply with {start}{{"name": <function name>, "arguments": '
        f"<arguments object>}}{end} and nothing else."
    )
