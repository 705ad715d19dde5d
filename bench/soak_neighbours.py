"""The soak's neighbours phase (bench/soak.py): what other clients do to a tenant's streams.

One tenant's streams (its key unlimited) are timed to their first token alone, three
runs (once the jobs of the earlier phases are done: a quantize job would share the CPU),
then beside each kind of neighbour:
- a tenant whose key is limited to 2 requests a minute, which has spent them, and sends
  16 at once (each must be a 429, and cost the other tenant nothing);
- clients that declare bodies far past the route's limit and push them as fast as they
  can, and clients that send their body a byte a second (the web server must answer 413
  and 408, and spool nothing past the limit).
The tenant's p95 time to first token beside them must stay within the spread of its runs
alone: their highest p95, plus their range, plus a tenth.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections import Counter

import openai
from servers import MODEL_NAME
from soak_clients import PROMPTS, TOKENS, Clients, Outcome, Phase, one

FINAL = ("succeeded", "failed", "cancelled")
TENANT_STREAMS = 8  # the unlimited tenant's streams per run, all at once
LIMITED_BURST = 16  # what the limited tenant (2 a minute) sends at once
OVERSIZED = 4  # clients pushing a body past the limit
SLOW = 4  # clients sending their body a byte a second
OVERSIZED_BYTES = 128 << 20  # declared; the limit on /v1/chat/completions is 8 MiB
BODY_SECONDS = 5  # the soak lab's MLXLAB_REQUEST_BODY_SECONDS: slow bodies end here


async def _first_token(c: Clients, i: int) -> float | None:
    """Seconds to the first text of one stream; None if it failed."""
    started = time.monotonic()
    try:
        stream = await c.openai.chat.completions.create(
            model=MODEL_NAME, max_tokens=TOKENS, stream=True,
            messages=[{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} (tenant {i})"}],
        )  # fmt: skip
        first = None
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.monotonic() - started
        return first
    except openai.APIError:
        return None


async def p95_first_token(c: Clients, offset: int) -> float:
    """The p95 time to first token of one run of the tenant's streams."""
    times = await asyncio.gather(*(_first_token(c, offset + i) for i in range(TENANT_STREAMS)))
    served = sorted(t for t in times if t is not None)
    return served[min(len(served) - 1, round(0.95 * (len(served) - 1)))] if served else 0.0


def _status(answer: bytes) -> str:
    line = answer.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    return f"HTTP {line.split()[1]}" if line.startswith("HTTP/") else "closed, no answer"


def _oversized(port: int) -> tuple[str, int]:
    """Declare a body far past the limit and push it until the server hangs up: what it
    answered, and the bytes it took before that."""
    sent, chunk = 0, b"x" * (1 << 16)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\n"
                     b"Content-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % OVERSIZED_BYTES)  # fmt: skip
        try:
            while sent < OVERSIZED_BYTES:
                sent += conn.send(chunk)
        except OSError:  # reset or broken pipe: the server closed it
            pass
        try:
            answer = conn.recv(4096)
        except OSError:
            answer = b""
    return _status(answer), sent


def _slow(port: int) -> tuple[str, float]:
    """A body a byte a second: what the server answered, and after how long."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=BODY_SECONDS + 30) as conn:
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")  # fmt: skip
        answer = b""
        try:
            while not answer:
                conn.send(b"{")
                conn.settimeout(1.0)
                try:
                    answer = conn.recv(4096) or b"closed"
                except TimeoutError:
                    continue
        except OSError:
            pass
    return _status(answer), time.monotonic() - started


def _spooled_bytes(pid: int) -> int:
    """The largest deleted file the web process holds open: a spooled request body (its
    log and database are files with names)."""
    largest = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                largest = max(largest, os.stat(f"/proc/{pid}/fd/{fd}").st_size)
        except OSError:  # closed meanwhile
            continue
    return largest


async def _watch_spool(pid: int, until: asyncio.Event) -> int:
    largest = 0
    while not until.is_set():
        largest = max(largest, _spooled_bytes(pid))
        await asyncio.sleep(0.05)
    return largest


async def _beside_bodies(lab, c: Clients) -> tuple[float, list, list, int]:
    web = lab.child("httpserver")
    done = asyncio.Event()
    spool = asyncio.ensure_future(_watch_spool(web, done))
    bodies = [asyncio.to_thread(_oversized, lab.port) for _ in range(OVERSIZED)]
    slow = [asyncio.to_thread(_slow, lab.port) for _ in range(SLOW)]
    beside, *answers = await asyncio.gather(p95_first_token(c, 6000), *bodies, *slow)
    done.set()
    return beside, answers[:OVERSIZED], answers[OVERSIZED:], await spool


async def neighbours(lab, c: Clients, args) -> Phase:
    phase = Phase("a tenant's streams beside a rate-limited tenant and hostile bodies")
    key = lab.manage("create_api_key", "--user", "tenant-limited", "--create-user", "--rpm", "2")
    limited = Clients(lab)
    limited.openai = openai.AsyncOpenAI(base_url=f"{lab.url}/v1", api_key=key, max_retries=0)
    await asyncio.to_thread(lab.wait, lambda: all(j["status"] in FINAL for j in lab.jobs()), 600)
    alone = [await p95_first_token(c, 1000 * run) for run in (1, 2, 3)]
    spent = await asyncio.gather(*(one(limited, "chat", f"{PROMPTS[i]} (allowed)") for i in (0, 1)))
    burst = [one(limited, "chat", f"{PROMPTS[i % 4]} (limited {i})") for i in range(LIMITED_BURST)]
    beside_limited, *refused = await asyncio.gather(p95_first_token(c, 4000), *burst)
    beside_bodies, oversized, slow, spooled = await _beside_bodies(lab, c)
    bodies = (Outcome(label, None) for label, _ in (*oversized, *slow))
    phase.outcomes = [*spent, *refused, *bodies]
    lab.neighbours = {
        "alone_p95_ttft_s": [round(t, 3) for t in alone],
        "allowed_p95_ttft_s": round(max(alone) + (max(alone) - min(alone)) + 0.1 * max(alone), 3),
        "beside_limited_p95_ttft_s": round(beside_limited, 3),
        "limited_allowance": dict(Counter(o.label for o in spent)),
        "limited_answers": dict(Counter(o.label for o in refused)),
        "beside_bodies_p95_ttft_s": round(beside_bodies, 3),
        "oversized_answers": dict(Counter(label for label, _ in oversized)),
        "oversized_bytes_taken_max": max(sent for _, sent in oversized),
        "slow_answers": dict(Counter(label for label, _ in slow)),
        "slow_answered_after_s_max": round(max(after for _, after in slow), 1),
        "largest_spool_bytes": spooled,
        "body_limit_bytes": lab.body_limit,
    }
    phase.notes.append(json.dumps(lab.neighbours))
    return phase
