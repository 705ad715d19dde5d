"""Decode speed with a JSON-schema constraint against the same request without one."""

from __future__ import annotations

from openai import AsyncOpenAI
from workload import stream_chat

PROMPT = "Describe a lighthouse as JSON with a long description."
# A schema that leaves room for a long answer, so decode (not the grammar's end) is measured.
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "description": {"type": "string"}},
    "required": ["name", "description"],
}


async def constrained_decode(client: AsyncOpenAI, model: str, max_tokens: int) -> dict:
    """mlx_lm.server ignores response_format, so only MLX Lab's two figures mean anything."""
    free = await stream_chat(client, model, PROMPT, max_tokens)
    constrained = await stream_chat(
        client,
        model,
        PROMPT,
        max_tokens,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
    )
    slowdown = None
    if free.decode_tps and constrained.decode_tps:
        slowdown = 1 - constrained.decode_tps / free.decode_tps
    return {
        "free_decode_tps": free.decode_tps,
        "constrained_decode_tps": constrained.decode_tps,
        "constrained_slowdown": slowdown,
    }
