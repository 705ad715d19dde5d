"""What a model worker's restart costs a conversation (`make bench`).

    .venv/bin/python bench/durability.py [--repeats N]

One MLX Lab on loopback, its model worker killed (SIGKILL) and restarted by its
supervisor between the turns of a conversation:

- turn 2 after a restart: the time to first token of a conversation's second turn when
  its first turn ran on the worker before (its KV cache on disk, the prompt cache's disk
  tier), against the same figure on a hot worker (in RAM) and against a cold one (a
  conversation nothing cached: the whole ~650-token prefill, as every restart cost before
  the disk tier). Target: within 1.5x of hot. Each restart is followed by one short,
  unrelated request, so that the figure is the cache's and not the new process's first
  request (which pays for lazy initialisation whatever is cached).

- a resumed retry: a seeded sampled stream (temperature 0.8) interrupted at its 200th
  token, by the client hanging up or by a SIGKILL of its worker, then retried identically:
  the time the retry takes to give back all the text the first attempt had streamed (its
  checkpoint replayed, the rest regenerated), against the uninterrupted stream's time to
  the same point. Target: under a second.

Figures go to var/bench/durability.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
import uuid

from conversation import QUESTIONS, stream_messages, system_prompt
from servers import ROOT, mlxlab_spec, running, status
from workload import WARMUP_PROMPT, client_for

OUT = ROOT / "var" / "bench" / "durability.json"
TURN_TOKENS = 16


def worker(url: str, model: str) -> dict | None:
    report = status(url, "/engine")
    return next((w for w in report["workers"] if w["model"] == model), None)


def prompt_cache(url: str, model: str) -> dict:
    return status(url, "/stats")["models"][model]["prompt_cache"]


def restart_worker(url: str, model: str) -> float:
    """SIGKILL the model's worker and wait for its successor; seconds until it is ready."""
    before = worker(url, model)
    killed = time.perf_counter()
    os.kill(before["pid"], signal.SIGKILL)
    while True:
        now = worker(url, model)
        if now and now["state"] == "ready" and now["pid"] != before["pid"]:
            return time.perf_counter() - killed
        if time.perf_counter() - killed > 180:
            raise RuntimeError("the worker did not come back")
        time.sleep(0.1)


def wait_for_disk(url: str, model: str, writes: int) -> None:
    deadline = time.monotonic() + 60
    while prompt_cache(url, model)["disk_writes"] < writes:
        if time.monotonic() > deadline:
            raise RuntimeError("the disk tier did not write the first turn")
        time.sleep(0.05)


def conversation(reply: str | None = None) -> list[dict]:
    messages = [
        {"role": "system", "content": system_prompt(uuid.uuid4().hex[:8])},
        {"role": "user", "content": QUESTIONS[0]},
    ]
    if reply is not None:
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": QUESTIONS[1]},
        ]
    return messages


async def turn2_after_restart(url: str, model: str, repeats: int) -> dict:
    client = client_for(url)
    hot, restarted, cold, ready = [], [], [], []
    try:
        await stream_messages(client, model, [{"role": "user", "content": WARMUP_PROMPT}], 4)
        for _ in range(repeats):
            # Hot: both turns on one worker.
            messages = conversation()
            _, reply = await stream_messages(client, model, messages, TURN_TOKENS)
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": QUESTIONS[1]},
            ]
            result, _ = await stream_messages(client, model, messages, TURN_TOKENS)
            hot.append(result)
            # Cold: a second turn nothing has cached (the whole prompt prefilled).
            result, _ = await stream_messages(client, model, conversation(reply), TURN_TOKENS)
            cold.append(result)
            # After a restart: turn 1, its cache written to disk, the worker killed.
            writes = prompt_cache(url, model)["disk_writes"]
            messages = conversation()
            _, reply = await stream_messages(client, model, messages, TURN_TOKENS)
            wait_for_disk(url, model, writes + 2)
            ready.append(restart_worker(url, model))
            await stream_messages(client, model, [{"role": "user", "content": WARMUP_PROMPT}], 4)
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": QUESTIONS[1]},
            ]
            result, _ = await stream_messages(client, model, messages, TURN_TOKENS)
            restarted.append(result)
    finally:
        await client.close()

    def median(results) -> float:
        return statistics.median(r.ttft for r in results)

    return {
        "hot_ttft_s": median(hot),
        "after_restart_ttft_s": median(restarted),
        "cold_ttft_s": median(cold),
        "restart_over_hot": median(restarted) / median(hot),
        "worker_ready_s": statistics.median(ready),
        "prompt_tokens": restarted[0].prompt_tokens,
        "ttft_s": {
            "hot": [r.ttft for r in hot],
            "after_restart": [r.ttft for r in restarted],
            "cold": [r.ttft for r in cold],
        },
        "cached_tokens": {
            "hot": [r.cached_tokens for r in hot],
            "after_restart": [r.cached_tokens for r in restarted],
            "cold": [r.cached_tokens for r in cold],
        },
    }


STORY = [{"role": "user", "content": "Write a very long story about a dragon who learns to sail."}]
INTERRUPT_AT = 200


async def story(client, model: str, *, until: int = 0, reach: int = 0, kill: int = 0) -> dict:
    """One seeded stream of STORY; the client hangs up after `until` content chunks, or
    SIGKILLs worker `kill` at that chunk; the seconds until its text was `reach` long."""
    sent = time.perf_counter()
    raw = await client.chat.completions.with_raw_response.create(
        model=model, messages=STORY, max_tokens=INTERRUPT_AT + 60, temperature=0.8, seed=7,
        stream=True,
    )  # fmt: skip
    events = raw.parse()
    text, chunks, reached = "", 0, None
    try:
        async for chunk in events:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
                chunks += 1
                if reached is None and reach and len(text) >= reach:
                    reached = time.perf_counter() - sent
                if chunks == until and kill:
                    os.kill(kill, signal.SIGKILL)
                elif chunks == until:
                    break
    except Exception:  # the worker killed under it: the stream's error frame
        pass
    finally:
        await events.close()
    resumed = raw.headers.get("x-resumed-from")
    return {"text": text, "seconds": reached, "resumed_from": int(resumed or 0)}


async def resumed_retry(url: str, model: str) -> dict:
    client = client_for(url)
    warm_up = [{"role": "user", "content": WARMUP_PROMPT}]
    try:
        await stream_messages(client, model, warm_up, 4)
        first = await story(client, model, until=INTERRUPT_AT)  # the client hangs up
        retry = await story(client, model, reach=len(first["text"]))
        # Uninterrupted: the retry finished, so no checkpoint is left to resume.
        whole = await story(client, model, reach=len(first["text"]))
        pid = worker(url, model)["pid"]
        killed = await story(client, model, until=INTERRUPT_AT, kill=pid)
        restart_worker_seen(url, model, pid)
        await stream_messages(client, model, warm_up, 4)
        after_kill = await story(client, model, reach=len(killed["text"]))
    finally:
        await client.close()
    return {
        "interrupted_at_tokens": INTERRUPT_AT,
        "hang_up": {"retry_s": retry["seconds"], "resumed_from": retry["resumed_from"]},
        "sigkill": {"retry_s": after_kill["seconds"], "resumed_from": after_kill["resumed_from"]},
        "uninterrupted_s": whole["seconds"],
        # The SIGKILL retry against the uninterrupted run before it (the same cached prompt);
        # the hang-up retry replays its first attempt, whose prompt was prefilled cold.
        "same_text": after_kill["text"] == whole["text"],
        "hang_up_continues_its_attempt": retry["text"].startswith(first["text"]),
    }


def restart_worker_seen(url: str, model: str, pid: int) -> None:
    """Wait for the successor of the worker `pid`, killed by someone else."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = worker(url, model)
        if now and now["state"] == "ready" and now["pid"] != pid:
            return
        time.sleep(0.1)
    raise RuntimeError("the worker did not come back")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = mlxlab_spec()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with running(spec, OUT.parent / "durability.log") as (url, _pid):
        turn2 = asyncio.run(turn2_after_restart(url, spec.model, args.repeats))
        resumed = asyncio.run(resumed_retry(url, spec.model))
    report = {"turn2_after_restart": turn2, "resumed_retry": resumed}
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"turn-2 time to first token ({turn2['prompt_tokens']}-token prompt, median of "
        f"{args.repeats}): hot {turn2['hot_ttft_s']:.3f} s, after a worker restart "
        f"{turn2['after_restart_ttft_s']:.3f} s ({turn2['restart_over_hot']:.2f}x hot; "
        f"target <= 1.5x), cold {turn2['cold_ttft_s']:.3f} s"
    )
    hang_up, killed = resumed["hang_up"], resumed["sigkill"]
    print(
        f"a retry of a stream interrupted at token {INTERRUPT_AT} back at that point: after a "
        f"hang-up {hang_up['retry_s']:.3f} s (resumed from {hang_up['resumed_from']}), after a "
        f"SIGKILL {killed['retry_s']:.3f} s (from {killed['resumed_from']}); uninterrupted "
        f"{resumed['uninterrupted_s']:.3f} s; target < 1 s; the same text as uninterrupted: "
        f"{resumed['same_text']}"
    )
    print(f"results in {OUT.relative_to(ROOT)}")
    slowest = max(hang_up["retry_s"], killed["retry_s"])
    same = resumed["same_text"] and resumed["hang_up_continues_its_attempt"]
    good = turn2["restart_over_hot"] <= 1.5 and slowest < 1.0 and same
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
