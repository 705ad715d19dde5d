"""Benchmark MLX Lab against mlx_lm.server on the same model and workload (`make bench`).

Each server runs alone, in turn, so that neither competes with the other for the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from conversation import two_turns
from cpu import OtherLoad, cpu_busy
from servers import ROOT, ServerSpec, mlx_lm_spec, mlxlab_spec, running
from speculative import speculative_decode, speculative_lines
from structured import constrained_decode
from workload import client_for, concurrent, single_stream, warm_up

OUT_DIR = ROOT / "var" / "bench"


@dataclass(frozen=True)
class Config:
    repeats: int
    decode_tokens: int
    streams: int
    stream_tokens: int


DEFAULT = Config(repeats=3, decode_tokens=64, streams=8, stream_tokens=32)
QUICK = Config(repeats=1, decode_tokens=24, streams=8, stream_tokens=16)

# (label, key in results, higher is better)
METRICS = [
    ("decode tokens/s, 1 stream (median)", "decode_tps", True),
    ("TTFT seconds, 1 stream (median)", "ttft_s", False),
    ("aggregate tokens/s, {streams} streams", "aggregate_tps", True),
    ("prefill tokens/s, ~650-token chat prompt", "prefill_tps", True),
    ("TTFT seconds, turn 2 after a ~600-token system prompt", "turn2_ttft_s", False),
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens and repeats")
    parser.add_argument("--only", choices=["mlxlab", "mlx_lm"], help="benchmark one server")
    parser.add_argument(
        "--skip-boundary", action="store_true", help="skip the process-boundary benchmark"
    )
    parser.add_argument(
        "--skip-remote", action="store_true", help="skip the remote-worker benchmark"
    )
    parser.add_argument(
        "--skip-distributed", action="store_true", help="skip the two-rank worker benchmark"
    )
    return parser.parse_args()


async def measure(url: str, model: str, config: Config, *, ours: bool = False) -> dict:
    client = client_for(url)
    try:
        await warm_up(client, model)
        single = await single_stream(client, model, config.repeats, config.decode_tokens)
        many = await concurrent(client, model, config.streams, config.stream_tokens)
        chat = await two_turns(client, model, max_tokens=16)
        structured = await constrained_decode(client, model, config.decode_tokens)
        # mlx_lm.server drafts only with a draft model, and turns batching off for it.
        speculative = await speculative_decode(client, model, config.repeats) if ours else None
    finally:
        await client.close()
    return {
        "decode_tps": single["decode_tps"],
        "ttft_s": single["ttft_s"],
        "aggregate_tps": many["aggregate_tps"],
        "prefill_tps": chat["prefill_tps"],
        "turn2_ttft_s": chat["turn2_ttft_s"],
        "single_stream": single,
        "concurrent": many,
        "conversation": chat,
        "structured": structured,
        "speculative": speculative,
    }


def bench_server(spec: ServerSpec, config: Config) -> dict:
    log_path = OUT_DIR / f"{spec.key}.log"
    print(f"== {spec.label}: starting (log: {log_path.relative_to(ROOT)})", flush=True)
    busy_before = busy_warning(f"before {spec.label}")
    started = time.perf_counter()
    try:
        with running(spec, log_path) as (url, pid):
            other = OtherLoad(pid)
            result = asyncio.run(measure(url, spec.model, config, ours=spec.key == "mlxlab"))
            result["other_cpu_share"] = other.share()
    except Exception as error:  # one broken server must not hide the other's figures
        print(f"== {spec.label}: FAILED: {error}", flush=True)
        return {"error": str(error)}
    result["server_seconds"] = time.perf_counter() - started
    result["other_cpu_busy_before_after"] = [busy_before, busy_warning(f"after {spec.label}")]
    print(f"== {spec.label}: done in {result['server_seconds']:.0f}s", flush=True)
    if (result["other_cpu_share"] or 0) > 0.1:
        share = result["other_cpu_share"]
        print(f"== warning: other processes used {share:.0%} of the CPU meanwhile", flush=True)
    return result


def busy_warning(when: str) -> float | None:
    # The two cores are easily shared with other work (tests, other servers), which skews
    # every figure; measured while no server of ours runs, so any load is someone else's.
    busy = cpu_busy()
    if busy is not None and busy > 0.15:
        print(f"== warning: CPU {busy:.0%} busy {when}; results may be skewed", flush=True)
    return busy


def ratio(ours: float | None, theirs: float | None, higher_is_better: bool) -> float | None:
    if not ours or not theirs:
        return None
    return ours / theirs if higher_is_better else theirs / ours


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(results: dict[str, dict], config: Config) -> tuple[str, dict[str, float | None]]:
    ours, theirs = results.get("mlxlab", {}), results.get("mlx_lm", {})
    header = "ratio ours/theirs, TTFT theirs/ours (>1.0 = MLX Lab better)"
    rows = [("metric", "MLX Lab", "mlx_lm.server", header)]
    ratios: dict[str, float | None] = {}
    for label, key, higher in METRICS:
        ratios[key] = ratio(ours.get(key), theirs.get(key), higher)
        cells = (fmt(ours.get(key)), fmt(theirs.get(key)), fmt(ratios[key]))
        rows.append((label.format(streams=config.streams), *cells))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines), ratios


def machine() -> dict:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mlx": importlib.metadata.version("mlx"),
        "mlx_lm": importlib.metadata.version("mlx-lm"),
        "openai": importlib.metadata.version("openai"),
    }


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine()
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line]
    return names[0] if names else platform.machine()


def exit_on_sigterm() -> None:
    # SystemExit unwinds through the `finally` blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def structured_line(structured: dict | None) -> str:
    """Grammar cost on MLX Lab alone: mlx_lm.server ignores response_format."""
    if not structured or structured.get("constrained_slowdown") is None:
        return "JSON-schema constrained decode: not measured"
    ratio = structured["constrained_decode_tps"] / structured["free_decode_tps"]
    return (
        f"JSON-schema constrained decode (MLX Lab): {structured['constrained_decode_tps']:.2f} "
        f"tokens/s vs {structured['free_decode_tps']:.2f} unconstrained = {ratio:.2f}x "
        "(target >= 1.0x: fast-forwarding makes up for the grammar's cost)"
    )


def bench_boundary(quick: bool) -> int:
    """bench/boundary.py, in a process of its own: it loads the model itself and in a worker."""
    print("\n== the process boundary: bench/boundary.py", flush=True)
    argv = [sys.executable, str(ROOT / "bench" / "boundary.py"), *(["--quick"] if quick else [])]
    # Run after the servers are stopped, so it has the CPU to itself like they did.
    return subprocess.run(argv, cwd=ROOT).returncode


def bench_script(name: str, title: str) -> int:
    """One of the standalone benches (bench/NAME.py), in its own process."""
    print(f"\n== {title}: bench/{name}.py", flush=True)
    return subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py")], cwd=ROOT).returncode


def main() -> int:
    args = parse_args()
    exit_on_sigterm()
    config = QUICK if args.quick else DEFAULT
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    specs = [spec for spec in (mlxlab_spec(), mlx_lm_spec()) if args.only in (None, spec.key)]
    started = time.perf_counter()
    results = {spec.key: bench_server(spec, config) for spec in specs}
    text, ratios = table(results, config)
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {"quick": args.quick, **vars(config)},
        "results": results,
        "ratios": ratios,
        "run_seconds": time.perf_counter() - started,
    }
    out = OUT_DIR / "latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{text}\n")
    print(structured_line(results.get("mlxlab", {}).get("structured")))
    print("\n".join(speculative_lines(results.get("mlxlab", {}).get("speculative"))))
    print(f"total {report['run_seconds']:.0f}s; results in {out.relative_to(ROOT)}")
    failed = any("error" in result for result in results.values())
    if not args.skip_boundary and bench_boundary(args.quick) != 0:
        failed = True
    if not args.skip_remote and bench_script(
        "remote_worker", "A model worker on another host (a network namespace) against a local one"
    ):
        failed = True
    if not args.skip_distributed and bench_script(
        "distributed", "A two-rank mx.distributed worker against one rank"
    ):
        failed = True
    if bench_script("verify_cost", "What a verifying pass costs, by its width") != 0:
        failed = True
    if bench_script("kv_memory", "KV cache memory") != 0:
        failed = True
    if bench_script("eval_speed", "Evaluation throughput against mlx-lm's perplexity") != 0:
        failed = True
    if bench_script("llama_cpp", "One stream against llama.cpp on the same GGUF file") != 0:
        failed = True
    if bench_script("llama_cpp_qwen3", "Qwen3's shape against llama.cpp, the same weights") != 0:
        failed = True
    if bench_script("durability", "A model worker's restart: the prompt cache on disk") != 0:
        failed = True
    if bench_script("replicas", "One model on two replicas against one, and prefix routing") != 0:
        failed = True
    if bench_script("families", "One stream per model family: fused layers against mlx-lm's") != 0:
        failed = True
    if bench_script("embeddings", "Embeddings per second: batched against one at a time") != 0:
        failed = True
    if bench_script("vision", "An image row against a text row, and against mlx-vlm") != 0:
        failed = True
    if (
        bench_script("token_history", "A 10-turn agent loop's cache hits, token history or not")
        != 0
    ):
        failed = True
    if bench_script("companion_hop", "A draft model in a companion worker against inline") != 0:
        failed = True
    if bench_script("tool_fill", "Time per tool call in an agent loop, fill off/strict/echo") != 0:
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        # The servers were already stopped on the way out; a traceback would only add noise.
        print("\ninterrupted; servers stopped", file=sys.stderr)
        sys.exit(130)
