"""Served throughput: the running lab over HTTP against the engine alone, in one sitting.

    python3 bench/gpu_served.py --out DIR [--url http://127.0.0.1:8000] [--key KEY]
        [--model smollm2-135m-instruct] [--folder var/models/smollm2-135m-instruct]
        [--streams 1,8,32,64,128] [--tokens 128]

The lab (`make run`) serves `--model`, whose folder is `--folder`; this process runs the
same folder in an engine of its own (as bench/gpu.py does, the lab's worker idle
meanwhile), then sends the same prompts to the lab with the `openai` SDK (async, streamed,
greedy, spread over up to 8 client processes, bench/served_clients.py, so that the client
is not the bound): per concurrency, the aggregate tokens/s of engine and lab, best of two
rounds, split into how long the last stream waited for its first token (the burst's
admission) and the streams' summed decode rates; and one stream's time to first token.
Every request's prompt is its own (a number in front), so no side measures a prompt-cache
hit the other does not. Targets (issue 53):
served aggregate at least 90% of the engine's at every concurrency, and served time to
first token within 5 ms of the engine's. Runs on the CPU too, slowly: a smoke run is
`--streams 1,2 --tokens 8`. Writes DIR/gpu_served.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openai import AsyncOpenAI

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from bench.gpu import as_served, collect, prompts  # noqa: E402
from bench.workload import CONCURRENT_PROMPTS  # noqa: E402

ROUNDS = 2
TTFT_REPEATS = 5
PREFILL = 512  # prompt tokens of the engine's prefill row (llama.cpp's pp512)
CLIENTS = 8  # client processes at most (bench/served_clients.py)
CLIENT_START_S = 5.0  # time the client processes get to start, import and connect


def texts(count: int, round_: int) -> list[str]:
    return [
        f"Request {round_}-{i}. {CONCURRENT_PROMPTS[i % len(CONCURRENT_PROMPTS)]}"
        for i in range(count)
    ]


def engine_side(folder: Path, streams: list[int], tokens: int) -> dict:
    from inference.engine import Engine, EngineConfig, GenerationRequest, load_model

    config = EngineConfig(max_batch_size=max(streams), warm_up=True)
    engine = as_served(Engine(lambda: load_model(folder), config=config).start())

    def ids(text: str) -> list[int]:
        return list(
            engine.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True
            )
        )

    def aggregate(prompts: list[str]) -> dict:
        started = time.perf_counter()
        requests = [GenerationRequest(ids(text), max_tokens=tokens) for text in prompts]
        rows = collect(engine, requests)
        ended = time.perf_counter()
        return split([(started, row[0], row[-1], len(row)) for row in rows], started, ended)

    def first_token(text: str) -> float:
        started = time.perf_counter()
        stamps = collect(engine, [GenerationRequest(ids(text), max_tokens=2)])[0]
        return stamps[0] - started

    def prefill(length: int) -> float:
        prompt = prompts(1, length, engine.vocab_size, seed=length)[0]
        started = time.perf_counter()
        stamps = collect(engine, [GenerationRequest(prompt, max_tokens=1)])[0]
        return length / (stamps[0] - started)

    try:
        rows = {}
        for n in streams:
            rows |= best_round([aggregate(texts(n, r)) for r in range(ROUNDS)], n)
        rates = []
        for _ in range(3):  # a prompt of its own each time: no prefix cached
            rates.append(prefill(PREFILL + len(rates)))
        rows["prefill_tps"] = max(rates)
        rows["ttft_s"] = statistics.median(
            first_token(text) for text in texts(TTFT_REPEATS, ROUNDS)
        )
        return rows
    finally:
        engine.shutdown()


def split(streams: list, started: float, ended: float) -> dict:
    """A round's aggregate tokens/s, and what it is made of: how long after the round's
    start the last stream's first token came (the burst's admission), and the streams'
    summed decode rates (first token to last). `streams`: (sent, first, end, tokens)."""
    decode = sum((n - 1) / (end - first) for _, first, end, n in streams if n > 1 and end > first)
    return {"tps": sum(n for *_, n in streams) / (ended - started),
            "admitted_s": max(first for _, first, _, _ in streams) - started,
            "decode_tps": decode}  # fmt: skip


def best_round(rounds: list[dict], n: int) -> dict:
    best = max(rounds, key=lambda r: r["tps"])
    return {f"streams{n}_{name}": value for name, value in best.items()}


def spread(url: str, key: str, model: str, prompts: list[str], tokens: int) -> dict:
    """The aggregate tokens/s of `prompts` sent at once from CLIENTS processes at most
    (bench/served_clients.py): one process's SDK would bound a GPU's rates."""
    processes = min(len(prompts), CLIENTS)
    at = time.monotonic() + CLIENT_START_S
    argv = [sys.executable, str(ROOT / "bench/served_clients.py"), url, key, model]
    argv += [str(tokens), str(at)]
    children = [
        subprocess.Popen(
            [*argv, json.dumps(prompts[i::processes])], stdout=subprocess.PIPE, text=True
        )
        for i in range(processes)
    ]
    streams = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode:
            raise SystemExit(f"a client process failed ({child.returncode})")
        streams += json.loads(out)
    started, ended = min(s[0] for s in streams), max(s[2] for s in streams)
    return split([(sent, first or end, end, n) for sent, first, end, n in streams], started, ended)


async def first_tokens(client: AsyncOpenAI, model: str) -> float:
    """One stream's median time to its first token, after a request that warms the way."""
    from bench.served_clients import one  # the SDK, only for a served run

    await one(client, model, "Say hello.", 4)  # the worker resident, a request behind it
    firsts = [await one(client, model, text, 2) for text in texts(TTFT_REPEATS, 20)]
    return statistics.median((first or end) - sent for sent, first, end, _ in firsts)


def served_side(url: str, key: str, model: str, streams: list[int], tokens: int) -> dict:
    from openai import AsyncOpenAI  # only here: an engine-only run needs no SDK

    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)
    rows = {"ttft_s": asyncio.run(first_tokens(client, model))}
    for n in streams:
        rows |= best_round(
            [spread(url, key, model, texts(n, 10 + r), tokens) for r in range(ROUNDS)], n
        )
    return rows


def table(engine: dict, served: dict, streams: list[int]) -> list[dict]:
    lines = []
    for n in streams:
        alone, over_http = engine[f"streams{n}_tps"], served[f"streams{n}_tps"]
        lines.append({"streams": n, "engine_tps": round(alone, 1),
                      "served_tps": round(over_http, 1), "share": round(over_http / alone, 3),
                      "meets_90_percent": over_http >= 0.9 * alone,
                      **{f"{side}_{name}": round(rows[f"streams{n}_{name}"], 3)
                         for side, rows in (("engine", engine), ("served", served))
                         for name in ("admitted_s", "decode_tps")}})  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", default="unused", help="an API key, once the lab has any")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--folder", type=Path, default=ROOT / "var/models/smollm2-135m-instruct")
    parser.add_argument("--streams", default="1,8,32,64,128")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--engine-only", action="store_true", help="no lab: the engine's rows")
    args = parser.parse_args()
    streams = [int(n) for n in args.streams.split(",")]
    engine = engine_side(args.folder, streams, args.tokens)
    if args.engine_only:  # beside a peer's figures (scripts/gpu-llama-cpp.sh peer)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_engine.json").write_text(json.dumps(engine, indent=2))
        print(json.dumps({"folder": str(args.folder), **engine}))
        return
    served = served_side(args.url, args.key, args.model, streams, args.tokens)
    rows = table(engine, served, streams)
    ttft = {"engine_ms": round(engine["ttft_s"] * 1000, 2),
            "served_ms": round(served["ttft_s"] * 1000, 2)}  # fmt: skip
    ttft["within_5_ms"] = ttft["served_ms"] - ttft["engine_ms"] <= 5
    for row in rows:
        print(f"{row['streams']:>4} streams: engine {row['engine_tps']:>8.1f} tok/s, served "
              f"{row['served_tps']:>8.1f} ({row['share']:.0%}); last first token "
              f"{row['engine_admitted_s']:.3f} / {row['served_admitted_s']:.3f} s; decode "
              f"{row['engine_decode_tps']:.0f} / {row['served_decode_tps']:.0f} tok/s")  # fmt: skip
    print(f"one stream's first token: engine {ttft['engine_ms']} ms, served {ttft['served_ms']} ms")
    print(f"prefill of {PREFILL} tokens (engine): {engine['prefill_tps']:.0f} tok/s")
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"model": args.model, "tokens": args.tokens, "rows": rows, "ttft": ttft,
              "engine_prefill_tps": round(engine["prefill_tps"], 1)}  # fmt: skip
    (args.out / "gpu_served.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
