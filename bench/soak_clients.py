"""The soak's clients (bench/soak.py): one stream per surface through its official SDK,
and what each answer came to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anthropic
import httpx
import openai
from servers import MODEL_NAME

TOKENS = 16  # per stream: enough to be mid-stream when a fault lands, short on 2 cores
PROMPTS = [
    "Write a short note about the sea.",
    "Describe a quiet morning in a small town.",
    "Explain why leaves change colour in autumn.",
    "Give three tips for a first camping trip.",
]


@dataclass
class Outcome:
    label: str  # "completed", "hung up", "stream error: <type>", "HTTP <status> <type>", ...
    status: int | None  # the HTTP status the answer started with, if one came
    response_id: str | None = None  # a stored response's id (the responses surface)


@dataclass
class Phase:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        counts = Counter(o.label for o in self.outcomes)
        return {
            "requests": len(self.outcomes),
            "completed": counts.pop("completed", 0),
            "hung_up": counts.pop("hung up", 0),
            "errors": dict(sorted(counts.items())),
            "5xx": sum(1 for o in self.outcomes if o.status is not None and o.status >= 500),
            "notes": self.notes,
        }


# -- clients, one per surface, each through its official SDK ---------------------------


class Clients:
    def __init__(self, lab) -> None:  # soak.Lab: its url and key
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        self.openai = openai.AsyncOpenAI(
            base_url=f"{lab.url}/v1", api_key=lab.key, max_retries=0, timeout=600,
            http_client=openai.DefaultAsyncHttpxClient(limits=limits),
        )  # fmt: skip
        self.anthropic = anthropic.AsyncAnthropic(
            base_url=lab.url, api_key=lab.key, max_retries=0, timeout=600,
            http_client=anthropic.DefaultAsyncHttpxClient(limits=limits),
        )  # fmt: skip
        self.opened = 0  # streams whose answer started (headers in)
        self.streaming = 0  # streams that carried text


async def _chat(c: Clients, prompt: str, hang_up: bool) -> Outcome:
    stream = await c.openai.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
        max_tokens=TOKENS, temperature=0, stream=True,
    )  # fmt: skip
    return await _read(c, stream, hang_up, lambda ch: ch.choices and ch.choices[0].delta.content)


async def _completions(c: Clients, prompt: str, hang_up: bool) -> Outcome:
    stream = await c.openai.completions.create(
        model=MODEL_NAME, prompt=prompt, max_tokens=TOKENS, temperature=0, stream=True
    )
    return await _read(c, stream, hang_up, lambda ch: ch.choices and ch.choices[0].text)


async def _responses(c: Clients, prompt: str, hang_up: bool) -> Outcome:
    stream = await c.openai.responses.create(
        model=MODEL_NAME, input=prompt, max_output_tokens=TOKENS, temperature=0, stream=True
    )
    return await _read(c, stream, hang_up, lambda ev: ev.type == "response.output_text.delta")


async def _messages(c: Clients, prompt: str, hang_up: bool) -> Outcome:
    stream = await c.anthropic.messages.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
        max_tokens=TOKENS, stream=True,
    )  # fmt: skip
    return await _read(c, stream, hang_up, lambda ev: ev.type == "content_block_delta")


SURFACES: dict[str, Callable[[Clients, str, bool], Awaitable[Outcome]]] = {
    "chat": _chat,
    "completions": _completions,
    "responses": _responses,
    "messages": _messages,
}


async def _read(c: Clients, stream, hang_up: bool, carries_text) -> Outcome:
    c.opened += 1
    status = stream.response.status_code
    texts, response_id = 0, None
    async for item in stream:
        if getattr(item, "type", None) == "error":  # the responses surface's error event
            return Outcome(f"stream error: {item.code}", status)
        if getattr(item, "type", None) == "response.completed":
            response_id = item.response.id
        if carries_text(item):
            texts += 1
            if texts == 1:
                c.streaming += 1
            if hang_up and texts == 2:
                await stream.close()  # the client leaves mid-stream
                return Outcome("hung up", status)
    return Outcome("completed" if texts else "no text", status, response_id)


async def one(c: Clients, surface: str, prompt: str, hang_up: bool = False) -> Outcome:
    try:
        return await SURFACES[surface](c, prompt, hang_up)
    except (openai.APIStatusError, anthropic.APIStatusError) as error:
        status = error.response.status_code
        if status == 200:  # an error frame in a stream that had started
            return Outcome(f"stream error: {_error_type(error)}", status)
        return Outcome(f"HTTP {status} {_error_type(error)}", status)
    except (openai.APIError, anthropic.APIError) as error:  # an error frame (OpenAI SDK)
        return Outcome(f"stream error: {_error_type(error)}", 200)
    except (httpx.HTTPError, openai.APIConnectionError, anthropic.APIConnectionError) as error:
        return Outcome(f"connection: {type(error).__name__}", None)


def _error_type(error) -> str:
    """The protocol's error type: OpenAI's body is the error, Anthropic's wraps it."""
    body = error.body if isinstance(error.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    return inner.get("type") or error.message[:60]


def load(c: Clients, streams: int, hang_ups: int = 0, offset: int = 0) -> list[Awaitable]:
    """`streams` readers and `hang_ups` leavers, spread evenly over the four surfaces."""
    surfaces = list(SURFACES)
    calls = []
    for i in range(streams + hang_ups):
        surface = surfaces[i % len(surfaces)]
        prompt = f"{PROMPTS[(i + offset) % len(PROMPTS)]} (note {i + offset})"
        calls.append(one(c, surface, prompt, hang_up=i >= streams))
    return calls
