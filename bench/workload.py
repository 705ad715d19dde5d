"""The measured workload: streaming chat requests through the official OpenAI SDK."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass

from openai import AsyncOpenAI

# Distinct prompts per repeat: mlx_lm.server keeps a prefix KV cache, so re-sending the exact
# same prompt would measure its cache hit (a 1-token prefill), not the time to first token.
DECODE_PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Write a long story about a baker who discovers a secret recipe in an old book.",
    "Write a long story about a young astronomer who spots a new comet one night.",
]
CONCURRENT_PROMPTS = [
    "Explain how a bicycle gear system works.",
    "Describe the water cycle to a ten-year-old.",
    "List some tips for growing tomatoes at home.",
    "Why is the sky blue? Answer in a few sentences.",
    "Summarise the plot of a classic detective story.",
    "What are the benefits of regular exercise?",
    "Describe a busy market in a coastal town.",
    "How do bees make honey?",
]
WARMUP_PROMPT = "Say hello."


@dataclass
class StreamResult:
    ttft: float  # seconds from sending the request to the first non-empty content delta
    decode_tps: float | None  # (completion tokens - 1) / (last token time - first token time)
    completion_tokens: int
    prompt_tokens: int | None
    cached_tokens: int | None  # prompt tokens a server reported as served from its cache
    usage_reported: bool
    elapsed: float
    accepted: int | None = None  # drafted tokens in the reply (speculative decoding)
    rejected: int | None = None


def client_for(base_url: str) -> AsyncOpenAI:
    # No retries: a retried request would silently distort the timings.
    return AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=600)


async def stream_chat(
    client: AsyncOpenAI, model: str, prompt: str, max_tokens: int, **extra
) -> StreamResult:
    sent = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    first = last = None
    chunks = 0
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
            chunks += 1
    done = time.perf_counter()
    if first is None or last is None:
        raise RuntimeError(f"{model}: the stream carried no content")
    # A chunk may hold several tokens (held-back partial UTF-8), so usage is the better count;
    # counting chunks is only the fallback for a server that omits it.
    tokens = usage.completion_tokens if usage else chunks
    details = getattr(usage, "prompt_tokens_details", None) if usage else None
    drafted = getattr(usage, "completion_tokens_details", None) if usage else None
    return StreamResult(
        ttft=first - sent,
        decode_tps=(tokens - 1) / (last - first) if tokens > 1 and last > first else None,
        completion_tokens=tokens,
        prompt_tokens=usage.prompt_tokens if usage else None,
        cached_tokens=getattr(details, "cached_tokens", None),
        usage_reported=usage is not None,
        elapsed=done - sent,
        accepted=getattr(drafted, "accepted_prediction_tokens", None),
        rejected=getattr(drafted, "rejected_prediction_tokens", None),
    )


async def warm_up(client: AsyncOpenAI, model: str) -> None:
    await stream_chat(client, model, WARMUP_PROMPT, 8)


async def single_stream(client: AsyncOpenAI, model: str, repeats: int, max_tokens: int) -> dict:
    # Sequential on purpose: one request in flight measures per-stream latency.
    runs = [await stream_chat(client, model, p, max_tokens) for p in DECODE_PROMPTS[:repeats]]
    rates = [r.decode_tps for r in runs if r.decode_tps is not None]
    return {
        "decode_tps": statistics.median(rates) if rates else None,
        "ttft_s": statistics.median(r.ttft for r in runs),
        # Separates prefill speed from prefix-cache hits, which TTFT alone mixes up.
        "uncached_prefill_tps": median_prefill_rate(runs),
        "runs": [asdict(r) for r in runs],
    }


def median_prefill_rate(runs: list[StreamResult]) -> float | None:
    rates = [
        (r.prompt_tokens - (r.cached_tokens or 0)) / r.ttft
        for r in runs
        if r.prompt_tokens is not None
    ]
    return statistics.median(rates) if rates else None


async def concurrent(client: AsyncOpenAI, model: str, streams: int, max_tokens: int) -> dict:
    prompts = [CONCURRENT_PROMPTS[i % len(CONCURRENT_PROMPTS)] for i in range(streams)]
    start = time.perf_counter()
    runs = await asyncio.gather(*(stream_chat(client, model, p, max_tokens) for p in prompts))
    wall = time.perf_counter() - start
    total = sum(r.completion_tokens for r in runs)
    return {
        "aggregate_tps": total / wall,
        "total_completion_tokens": total,
        "wall_s": wall,
        "runs": [asdict(r) for r in runs],
    }
