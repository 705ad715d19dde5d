"""One model on two replicas against one: throughput, and what prefix routing saves.

    .venv/bin/python bench/replicas.py            # 3 rounds of each
    .venv/bin/python bench/replicas.py --quick    # 1 round, shorter answers

(a) throughput: MLX Lab with one single-threaded worker (MLXLAB_QMM_THREADS=1), then
    with two (MLXLAB_MODEL_REPLICAS=NAME=2), each serving 8 concurrent streams; the
    aggregate tokens/s of each (the best round) and their ratio. Target: at least 1.7x
    on 2 cores: each replica decodes on a core of its own.
(b) a 10-turn conversation (a ~600-token system prompt, then 10 questions, no session
    key) on the two replicas, routed by cache (MLXLAB_REPLICA_ROUTING=cache: each turn
    follows its cached prefix to one replica) and then round-robin (every other turn
    lands where nothing of it is cached): the conversation's total time and its cached
    prompt tokens. Target: prefix routing faster.
Each server runs alone; results go to var/bench/replicas.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import time
import uuid
from pathlib import Path

from conversation import system_prompt
from cpu import cpu_busy
from run import OUT_DIR, machine
from servers import MODEL_NAME, ROOT, mlxlab_spec, running, status
from workload import CONCURRENT_PROMPTS, client_for, stream_chat, warm_up

TURNS = 10
QUESTIONS = [
    "Which room is on the roof?", "And which one is in the cellar?",
    "Where do guests bake bread?", "Which room faces the gate?",
    "Where are the old maps kept?", "Which room is in the east wing?",
    "Where are the swords polished?", "Which room is on the upper floor?",
    "Where is the cello practised?", "Which room is in the basement?",
]  # fmt: skip


def spec(replicas: int, routing: str = "cache"):
    """MLX Lab whose default model has `replicas` single-threaded workers."""
    base = mlxlab_spec()
    single = {"MLXLAB_QMM_THREADS": "1", "MLXLAB_BLAS_THREADS": "1"}

    def env(home: Path) -> dict[str, str]:
        return {
            **base.env(home), **single,
            "MLXLAB_MODEL_REPLICAS": f"{MODEL_NAME}={replicas}",
            "MLXLAB_REPLICA_ROUTING": routing,
        }  # fmt: skip

    def ready(health: dict) -> bool:
        workers = [w for w in health.get("workers", []) if w["model"] == MODEL_NAME]
        return len(workers) == replicas and all(w["state"] == "ready" for w in workers)

    return dataclasses.replace(base, env=env, is_ready=ready)


async def throughput(url: str, rounds: int, max_tokens: int) -> dict:
    client = client_for(url)
    try:
        await warm_up(client, MODEL_NAME)
        best = None
        for round_ in range(rounds):
            prompts = [f"{CONCURRENT_PROMPTS[i]} ({round_})" for i in range(8)]
            start = time.perf_counter()
            runs = await asyncio.gather(
                *(stream_chat(client, MODEL_NAME, p, max_tokens) for p in prompts)
            )
            wall = time.perf_counter() - start
            tps = sum(r.completion_tokens for r in runs) / wall
            best = max(best or 0.0, tps)
        return {"aggregate_tps": best}
    finally:
        await client.close()


async def conversation(url: str, max_tokens: int) -> dict:
    """One conversation of TURNS turns, each streamed: total seconds, cached tokens."""
    client = client_for(url)
    try:
        await warm_up(client, MODEL_NAME)
        messages = [{"role": "system", "content": system_prompt(uuid.uuid4().hex)}]
        started, cached = time.perf_counter(), []
        for question in QUESTIONS[:TURNS]:
            messages.append({"role": "user", "content": question})
            reply = await client.chat.completions.create(
                model=MODEL_NAME, messages=messages, max_tokens=max_tokens, temperature=0
            )
            cached.append(reply.usage.prompt_tokens_details.cached_tokens)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        return {"total_s": time.perf_counter() - started, "cached_tokens": cached}
    finally:
        await client.close()


def serve(name: str, server_spec, work) -> dict:
    """`work(url)` against a server of its own, started after the last one stopped."""
    busy = cpu_busy(1.0)  # what else ran on the machine just before (workers are children)
    with running(server_spec, OUT_DIR / f"replicas-{name}.log") as (url, _):
        result = asyncio.run(work(url))
        result["routed"] = {
            str(w["replica"]): w.get("routing", {}).get("routed")
            for w in status(url, "/engine")["workers"]
        }
    result["cpu_busy_before"] = busy
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, shorter answers")
    args = parser.parse_args()
    rounds, tokens = (1, 32) if args.quick else (3, 64)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    if (busy := cpu_busy()) and busy > 0.1:
        print(f"warning: {busy:.0%} of the CPU is busy already; figures will be low", flush=True)
    results = {
        "one": serve("one", spec(1), lambda url: throughput(url, rounds, tokens)),
        "two": serve("two", spec(2), lambda url: throughput(url, rounds, tokens)),
        "prefix": serve("prefix", spec(2), lambda url: conversation(url, 24)),
        "round_robin": serve("rr", spec(2, "round_robin"), lambda url: conversation(url, 24)),
    }
    ratio = results["two"]["aggregate_tps"] / results["one"]["aggregate_tps"]
    saved = results["round_robin"]["total_s"] / results["prefix"]["total_s"]
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "results": results,
        "throughput_ratio": ratio,
        "conversation_ratio": saved,
    }
    out = OUT_DIR / "replicas.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"8 streams, aggregate tok/s: one single-threaded replica "
        f"{results['one']['aggregate_tps']:.1f}, two {results['two']['aggregate_tps']:.1f} "
        f"= {ratio:.2f}x (target >= 1.7x)"
    )
    print(
        f"{TURNS}-turn conversation on two replicas: prefix routing "
        f"{results['prefix']['total_s']:.2f} s (cached {sum(results['prefix']['cached_tokens'])} "
        f"prompt tokens), round-robin {results['round_robin']['total_s']:.2f} s (cached "
        f"{sum(results['round_robin']['cached_tokens'])}) = {saved:.2f}x"
    )
    print(f"results in {out.relative_to(ROOT)}")
    return 0 if ratio >= 1.7 and saved > 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
