"""Streams for bench/gpu_served.py, from a client process of their own.

    python3 bench/served_clients.py URL KEY MODEL TOKENS AT PROMPTS_JSON

Waits until time.monotonic() reaches AT (every client process starts its streams at
once), sends each prompt as a streamed, greedy chat completion with the `openai` SDK
(async), and prints one JSON list: [sent, first content, end, completion tokens] per
stream, on the monotonic clock all processes of the machine share. One asyncio process
reads a few thousand chunks a second through the SDK: at a GPU's rates across 64 or more
streams it would be the bound, so the bench spreads the streams over several of these.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from openai import AsyncOpenAI


async def one(client: AsyncOpenAI, model: str, text: str, tokens: int) -> list:
    sent, first, usage = time.monotonic(), None, None
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=tokens,
        temperature=0.0, stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    async for chunk in stream:
        usage = chunk.usage or usage
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.monotonic()
    return [sent, first, time.monotonic(), usage.completion_tokens if usage else 0]


async def main(url: str, key: str, model: str, tokens: int, at: float, texts: list[str]):
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)
    late = time.monotonic() - at
    if late > 0:
        sys.exit(f"served_clients: ready {late:.2f} s after the common start")
    await asyncio.sleep(at - time.monotonic())
    return await asyncio.gather(*(one(client, model, text, tokens) for text in texts))


if __name__ == "__main__":
    url, key, model, tokens, at, texts = sys.argv[1:7]
    done = asyncio.run(main(url, key, model, int(tokens), float(at), json.loads(texts)))
    print(json.dumps(done))
