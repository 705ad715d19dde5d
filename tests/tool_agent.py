"""A few-shot weather agent the default model answers with tool calls (in its tools'
instruction format), and its two tools: one strict schema with an enum, one loose."""

from __future__ import annotations

import json

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zone": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def agent(city: str) -> list[dict]:
    """A few-shot weather agent: the default model answers it with a call."""
    shots = []
    for town, unit in (("Rome", "celsius"), ("Boston", "fahrenheit"), ("Madrid", "celsius")):
        call = {"name": "get_weather", "arguments": {"city": town, "unit": unit}}
        shots += [
            {"role": "user", "content": f"What's the weather in {town}?"},
            {"role": "assistant", "content": f"<tool_call>{json.dumps(call)}</tool_call>"},
        ]
    system = {
        "role": "system",
        "content": "You are a weather assistant. Always answer with a tool call.",
    }
    return [system, *shots, {"role": "user", "content": f"What's the weather in {city}?"}]
