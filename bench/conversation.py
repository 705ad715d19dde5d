"""Prefill speed and the second turn of a chat: the prompt cache's workload.

One conversation per server: a fresh ~600-token system prompt (a nonce first, so no
server can have it cached) and a question; then the same conversation with the reply and
a second question. Turn 1 measures prefill (uncached prompt tokens / TTFT), turn 2 the
time to first token when the server can reuse the KV cache of turn 1.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict

from openai import AsyncOpenAI
from workload import StreamResult

ROOMS = [
    ("library", "north", "reading old maps"),
    ("kitchen", "east", "baking bread at dawn"),
    ("observatory", "roof", "watching the winter stars"),
    ("greenhouse", "south", "growing lemons and tomatoes"),
    ("workshop", "cellar", "mending clocks and bicycles"),
    ("music room", "west", "practising the cello"),
    ("armoury", "tower", "polishing ceremonial swords"),
    ("chapel", "courtyard", "lighting candles for travellers"),
    ("stables", "gate", "grooming the grey horses"),
    ("gallery", "upper floor", "restoring faded portraits"),
    ("laundry", "basement", "folding linen for the guests"),
    ("archive", "east wing", "sorting letters from the war"),
]
QUESTIONS = ("Which room is on the roof?", "And which one is in the cellar?")


def system_prompt(nonce: str) -> str:
    """About 600 tokens of house rules for SmolLM2's tokenizer, with `nonce` first."""
    lines = [f"Session {nonce}. You are the steward of an old manor house."]
    for number, (room, place, activity) in enumerate(ROOMS, 1):
        lines.append(
            f"Rule {number}: the {room} lies in the {place} of the house; guests who ask "
            f"about it are told that it is best known for {activity}, and that it "
            "opens at nine in the morning and closes at six in the evening."
        )
    lines.append("Answer every question in one short sentence.")
    return "\n".join(lines)


async def stream_messages(
    client: AsyncOpenAI, model: str, messages: list[dict], max_tokens: int
) -> tuple[StreamResult, str]:
    """One streamed greedy chat request: its timings and its text."""
    sent = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    first = last = usage = None
    text = ""
    async for chunk in stream:
        usage = chunk.usage or usage
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
            text += chunk.choices[0].delta.content
    if first is None or usage is None:
        raise RuntimeError(f"{model}: the stream carried no content or no usage")
    details = getattr(usage, "prompt_tokens_details", None)
    tokens = usage.completion_tokens
    result = StreamResult(
        ttft=first - sent,
        decode_tps=(tokens - 1) / (last - first) if tokens > 1 and last > first else None,
        completion_tokens=tokens,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=getattr(details, "cached_tokens", None),
        usage_reported=True,
        elapsed=time.perf_counter() - sent,
    )
    return result, text


async def two_turns(client: AsyncOpenAI, model: str, max_tokens: int) -> dict:
    """Prefill tokens/s from turn 1, and the TTFT of turn 2 (the prompt cache's case)."""
    messages = [
        {"role": "system", "content": system_prompt(uuid.uuid4().hex[:8])},
        {"role": "user", "content": QUESTIONS[0]},
    ]
    first, reply = await stream_messages(client, model, messages, max_tokens)
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": QUESTIONS[1]}]
    second, _ = await stream_messages(client, model, messages, max_tokens)
    uncached = first.prompt_tokens - (first.cached_tokens or 0)
    return {
        "prefill_tps": uncached / first.ttft,
        "turn1_ttft_s": first.ttft,
        "turn2_ttft_s": second.ttft,
        "turns": [asdict(first), asdict(second)],
    }
