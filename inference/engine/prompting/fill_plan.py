"""A request's token fast-forwarding plan (drafts/fill.py): how the model's template
writes a tool call, what each offered tool's schema fixes, or why the request does not
fill."""

from __future__ import annotations

import json
from collections.abc import Callable

from ..drafts.fill import CallShape, FillPlan, ToolFill

FILL_MODES = ("off", "strict", "echo")
# A call the probe renders: names no template would hold for anything else.
PROBE_NAME = "zq_probe_tool"
PROBE_KEYS = ("zq_first", "zq_second")


def call_shape(render: Callable[..., str], markers: tuple[str, str]) -> CallShape | None:
    """How the template writes an assistant's tool call, read from its rendering of one
    (`render(messages, tools=...)`, PromptBuilder.render); for a template that ignores
    tools, the format tools_instruction asks for; None when neither is known (a template
    that writes calls other than as JSON between the markers)."""
    start, end = markers
    arguments = dict(zip(PROBE_KEYS, (1, 2), strict=True))
    probe = [
        {"role": "user", "content": "?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": PROBE_NAME, "arguments": arguments}},
            ],
        },
    ]  # fmt: skip
    tool = {"type": "function", "function": {"name": PROBE_NAME, "parameters": {}}}
    question = probe[:1]
    try:
        if render(question, tools=[tool]) == render(question):
            # The builder describes tools in words, with this format (tool_prompts.py).
            return CallShape(start + '{"name": "', '", "arguments": ', "}" + end)
        text = render(probe, tools=[tool])
    except Exception:  # a template that refuses the probe writes no call we could read
        return None
    return _shape_in(text, start, end)


def _shape_in(text: str, start: str, end: str) -> CallShape | None:
    name_at = text.rfind(PROBE_NAME)
    open_at = text.rfind(start, 0, name_at) if name_at >= 0 else -1
    first = text.find(f'"{PROBE_KEYS[0]}"', name_at)
    if open_at < 0 or first < 0:
        return None
    object_at = text.rfind("{", name_at, first)
    one = text.find("1", first)
    second = text.find(f'"{PROBE_KEYS[1]}"', one)
    two = text.find("2", second)
    close_at = text.find(end, two)
    if min(object_at, one, second, two, close_at) < 0:
        return None
    object_end = text.find("}", two)
    colon, comma = text[first + len(PROBE_KEYS[0]) + 2 : one], text[one + 1 : second]
    if colon.strip() != ":" or comma.strip() != "," or not 0 <= object_end < close_at:
        return None
    return CallShape(
        opener=text[open_at:name_at],
        after_name=text[name_at + len(PROBE_NAME) : object_at],
        closer=text[object_end + 1 : close_at + len(end)],
        colon=colon,
        comma=comma,
    )


def tool_fill(tool: dict) -> ToolFill:
    """What a tool definition's parameters schema fixes of its calls."""
    function = tool.get("function") or {}
    schema = function.get("parameters")
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = [key for key in schema.get("required") or () if key in properties]
    closed = schema.get("additionalProperties") is False or function.get("strict") is True
    values, starts = {}, {}
    for key, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        if "const" in spec:
            values[key] = (_json(spec["const"]),)
        elif isinstance(spec.get("enum"), list) and spec["enum"]:
            values[key] = tuple(_json(value) for value in spec["enum"])
        elif (
            start := {"string": '"', "object": "{", "array": "["}.get(spec.get("type"))
        ) is not None:
            starts[key] = start
    return ToolFill(
        name=str(function.get("name", "")),
        properties=tuple(properties),
        required=tuple(required),
        strict=closed and bool(properties) and set(required) == set(properties),
        values=values,
        starts=starts,
    )


def fill_plan(
    mode: str, call, shape: CallShape | None, marker: str, *, grammar, draft, media
) -> FillPlan | None:
    """The plan for a chat `call` (a wire.GenerateCall) offering tools, with its refusal
    where one applies; None where fill is off or no tool may be called."""
    chat = call.chat
    if mode == "off" or chat is None or not chat.tools or chat.tool_choice == "none":
        return None
    refused = (
        "logprobs" if call.logprobs or call.top_logprobs  # a filled token has no distribution
        else "grammar" if grammar is not None  # its forced tokens are fast-forwarded already
        else "draft" if draft is not None
        else "media" if media is not None
        else "template" if shape is None
        else ""
    )  # fmt: skip
    if refused:
        return FillPlan(mode, refused=refused)
    return FillPlan(mode, marker, shape, tuple(tool_fill(tool) for tool in chat.tools))


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False)
