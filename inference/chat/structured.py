"""Structured output: the constraint a request asks for, as one GrammarSpec.

OpenAI's `response_format` and vLLM's `guided_*` fields are read here; other surfaces
translate their own (Anthropic's output_config, the Responses API's text.format, the
lab's panel) with the same spec builders. When several are sent, one wins, in this
order (docs/API.md, "Structured output, tools and reasoning"): guided_grammar >
response_format json_schema > response_format json_object > structured_outputs /
guided_json > guided_regex > guided_choice.
"""

from __future__ import annotations

import json

from labsettings import lab_settings

from ..errors import ApiError
from ..protocol.grammar import GrammarSpec, choice_regex, schema_text


def _schema_object(value, param: str) -> dict:
    if isinstance(value, str):  # some clients send the schema as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            raise ApiError(f"{param} must be a JSON schema object", param=param) from None
    if not isinstance(value, dict):
        raise ApiError(f"{param} must be a JSON schema object", param=param)
    return value


def response_format_spec(rf) -> GrammarSpec | None:
    """OpenAI's `response_format` object; type `text` (or None) asks for nothing."""
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise ApiError(
            "response_format must be an object with type 'text', 'json_object' or 'json_schema'",
            param="response_format",
        )
    if rf["type"] == "json_object":
        return GrammarSpec("json_object", instruction=JSON_OBJECT_INSTRUCTION)
    if rf["type"] == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, dict):
            raise ApiError("response_format.json_schema must be an object", param="response_format")
        schema = _schema_object(spec.get("schema"), "response_format.json_schema.schema")
        name, description = spec.get("name"), spec.get("description")
        return schema_spec(
            schema,
            name if isinstance(name, str) and name else "response",
            description if isinstance(description, str) else "",
        )
    return None


# What the model is asked for when no grammar enforces the format: mlx-bun's words, so
# a client sees the same degraded behaviour from either server.
JSON_OBJECT_INSTRUCTION = (
    "You must respond with valid JSON only. "
    "Do not include any explanation or text outside the JSON object."
)


def schema_spec(schema: dict, name: str = "response", description: str = "") -> GrammarSpec:
    instruction = f"You must respond with valid JSON matching the '{name}' schema."
    if description:
        instruction += f" {description}"
    pretty = json.dumps(schema, indent=2, ensure_ascii=False)
    instruction += (
        f"\n\nJSON Schema:\n```json\n{pretty}\n```\n\n"
        "Respond with only the JSON object, no additional text or explanation."
    )
    return GrammarSpec("json_schema", schema_text(schema), instruction=instruction)


def check_schema_size(text: str, param: str) -> None:
    """A schema, regex or grammar within MLXLAB_MAX_SCHEMA_BYTES: compile time and memory
    grow with it (a 137 KB enum takes a second and 32 MB to compile)."""
    limit = lab_settings.max_schema_bytes
    if len(text.encode()) > limit:
        raise ApiError(f"{param} is larger than the {limit} bytes allowed", param=param)


def parse_structured_output(body: dict, *, response_format=None) -> GrammarSpec | None:
    """The one constraint this request asks for, or None; 400 when a field is malformed.

    `response_format` is a surface's own format field, translated, in place of the body's.
    """
    candidates = _structured_outputs(body, response_format)
    if not candidates:
        return None
    name, spec = candidates[0]
    check_schema_size(spec.source, name)
    return spec


def _structured_outputs(body: dict, response_format) -> list[tuple[str, GrammarSpec]]:
    candidates = []
    if (grammar := body.get("guided_grammar")) is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise ApiError("guided_grammar must be a nonempty string", param="guided_grammar")
        instruction = f"You must respond with text matching this grammar:\n\n{grammar}"
        candidates.append(("guided_grammar", GrammarSpec("ebnf", grammar, instruction)))
    if response_format is None:
        response_format = response_format_spec(body.get("response_format"))
    if response_format is not None:
        candidates.append(("response_format", response_format))
    for name in ("structured_outputs", "guided_json"):
        if (schema := body.get(name)) is not None:
            candidates.append((name, schema_spec(_schema_object(schema, name))))
    if (regex := body.get("guided_regex")) is not None:
        if not isinstance(regex, str) or not regex:
            raise ApiError("guided_regex must be a nonempty string", param="guided_regex")
        candidates.append(("guided_regex", regex_spec(regex)))
    if (choices := body.get("guided_choice")) is not None:
        if (
            not isinstance(choices, list)
            or not choices
            or not all(isinstance(c, str) and c for c in choices)
        ):
            raise ApiError(
                "guided_choice must be a nonempty list of nonempty strings", param="guided_choice"
            )
        candidates.append(("guided_choice", choice_spec(choices)))
    return candidates


def regex_spec(regex: str) -> GrammarSpec:
    instruction = f"You must respond with text matching this regular expression:\n\n{regex}"
    return GrammarSpec("regex", regex, instruction)


def choice_spec(choices: list[str]) -> GrammarSpec:
    listed = "\n".join(json.dumps(choice, ensure_ascii=False) for choice in choices)
    instruction = f"You must respond with exactly one of these choices:\n\n{listed}"
    return GrammarSpec("choice", choice_regex(choices), instruction)
