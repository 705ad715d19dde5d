"""The cost of the process boundary: one model in this process vs. in a worker.

    .venv/bin/python bench/boundary.py            # 5 repeats
    .venv/bin/python bench/boundary.py --quick    # 1 repeat, shorter answers

(a) in-process: an Engine here, prompts built by PromptBuilder and streamed by
    stream_events, as the web process did before the workers;
(b) through a worker: `manage.py modelworker` started by a Supervisor, reached over
    ZeroMQ with `Supervisor.open`, as the web process does now.
Both get the same GenerateCall values and the worker's own engine settings; they take
turns, never run together, and are warmed up first. The difference is the boundary.
"""

# ruff: noqa: E402  (sys.path first; inference.engine loads the BLAS before mlx.core,
# and the bench modules imported before it import no MLX)
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX
# The worker runs `manage.py`, which reads these settings; so does this process.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

from cpu import OtherLoad, cpu_busy
from run import OUT_DIR, machine
from workload import CONCURRENT_PROMPTS, DECODE_PROMPTS, WARMUP_PROMPT

from inference.engine import Engine, EngineConfig, load_model, stream_events
from inference.engine.acceleration.dense_weights import FastPathOptions
from inference.engine.prompting.prompt import PromptBuilder, PromptLimits
from inference.protocol import wire
from inference.protocol.events import Event, Failed, Finished, ReasoningDelta, TextDelta
from inference.protocol.sampling import SamplingParams
from inference.workers.supervisor import Supervisor
from inference.workers.worker import SupervisorConfig

MODEL_DIR = ROOT / "var" / "models" / "smollm2-135m-instruct"
SOCKET_DIR = OUT_DIR / "sockets"


@dataclass(frozen=True)
class Config:
    repeats: int
    decode_tokens: int
    ttft_tokens: int
    streams: int
    stream_tokens: int


DEFAULT = Config(repeats=5, decode_tokens=64, ttft_tokens=8, streams=8, stream_tokens=32)
QUICK = Config(repeats=1, decode_tokens=24, ttft_tokens=4, streams=8, stream_tokens=16)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, fewer tokens")
    parser.add_argument("--repeats", type=int, help="override the number of repeats")
    parser.add_argument("--path", type=Path, default=MODEL_DIR, help="the model folder")
    return parser.parse_args()


# -- the workload ---------------------------------------------------------------------


def chat_call(message: str, max_tokens: int) -> wire.GenerateCall:
    """A greedy chat turn; both sides get these very values."""
    return wire.GenerateCall(
        chat=wire.ChatInput(messages=[{"role": "user", "content": message}]),
        sampling=SamplingParams(temperature=0.0),
        max_tokens=max_tokens,
    )


@dataclass(frozen=True)
class Calls:
    ttft: wire.GenerateCall
    decode: wire.GenerateCall
    streams: list[wire.GenerateCall]
    warm_up: list[wire.GenerateCall]


def calls_for(config: Config) -> Calls:
    # The prompts of bench/workload.py, so the figures compare with the HTTP benchmark's.
    messages = [CONCURRENT_PROMPTS[i % len(CONCURRENT_PROMPTS)] for i in range(config.streams)]
    return Calls(
        ttft=chat_call(WARMUP_PROMPT, config.ttft_tokens),
        decode=chat_call(DECODE_PROMPTS[0], config.decode_tokens),
        streams=[chat_call(m, config.stream_tokens) for m in messages],
        # Every measured prompt once, with short answers: after this, the prompt cache of
        # each side holds the same prompts, so repeat 1 is not the only one that prefills.
        warm_up=[chat_call(m, 2) for m in (WARMUP_PROMPT, DECODE_PROMPTS[0], *messages)],
    )


# -- the two sides --------------------------------------------------------------------


def worker_settings() -> tuple[EngineConfig, FastPathOptions, PromptLimits]:
    """The engine settings a worker runs with, read by the worker's own code."""
    import django

    django.setup()
    from inference.management.commands.modelworker import (
        engine_config,
        fast_path_options,
        prompt_limits,
    )

    return engine_config(), fast_path_options(), prompt_limits()


class InProcess:
    """(a) The model in this process: the path before the workers."""

    key = "in_process"

    def __init__(self, path: Path) -> None:
        config, fast_path, limits = worker_settings()
        self.engine = Engine(lambda: load_model(path, fast_path=fast_path), config=config)
        self.engine.start()
        self.builder = PromptBuilder(self.engine.loaded, limits=limits)

    async def events(self, call: wire.GenerateCall) -> AsyncIterator[Event]:
        # Built here, on the loop, as the worker builds on its main thread: both TTFTs
        # include the template and the tokenizer.
        prepared = self.builder.build(call)
        async for event in stream_events(self.engine, prepared.request):
            yield event

    def describe(self) -> dict:
        cache = self.engine.prompt_cache
        return {
            "pid": os.getpid(),
            "fast_path": asdict(self.engine.loaded.fast_path),
            "prompt_cache": asdict(cache.stats()) if cache is not None else None,
        }

    def close(self) -> None:
        self.engine.shutdown()


def worker_command(model: str, path: str, address: str) -> list[str]:
    """As inference.engines._worker_command, without Django's BASE_DIR."""
    return [
        *(sys.executable, str(ROOT / "manage.py"), "modelworker", "--model", model),
        *("--path", path, "--listen", address, "--exit-with-parent"),
    ]


class ThroughWorker:
    """(b) The model in a worker process, behind a Supervisor: the path now."""

    key = "worker"

    def __init__(self, path: Path) -> None:
        self.model, self.path = path.name, str(path)
        config = SupervisorConfig(
            command=worker_command,
            socket_dir=SOCKET_DIR,
            max_loaded=1,
            idle_seconds=0,  # never unloaded mid-benchmark
            pinned=frozenset({self.model}),
        )
        self.supervisor = Supervisor(config)
        try:
            self.supervisor.ensure(self.model, self.path)  # blocks until the worker is ready
        except BaseException:
            self.supervisor.shutdown()  # not yet in the caller's list of sides to close
            raise
        self.socket_path = self.supervisor.models[self.model].workers[0].socket_path

    @property
    def pid(self) -> int | None:
        group = self.supervisor.models.get(self.model)
        return group.workers[0].pid if group else None

    async def events(self, call: wire.GenerateCall) -> AsyncIterator[Event]:
        stream = await self.supervisor.open(self.model, self.path, call)
        await stream.accepted()
        async for event in stream.events():
            yield event

    def describe(self) -> dict:
        status = self.supervisor.live_status(self.model).result(5)
        return asdict(status) if status is not None else {"pid": self.pid}

    def close(self) -> None:
        self.supervisor.shutdown()
        # Neither the worker nor the supervisor removes the socket file once it stops.
        if self.socket_path:
            Path(self.socket_path).unlink(missing_ok=True)


Side = InProcess | ThroughWorker


# -- the measurements -----------------------------------------------------------------


@dataclass
class Timing:
    sent: float  # perf_counter when the call left
    first: float  # ... at the first non-empty text
    last: float  # ... at the last one
    done: float  # ... at Finished
    tokens: int  # completion tokens, as Finished counts them
    prompt_tokens: int
    cached_tokens: int
    finish_reason: str
    text: str

    @property
    def ttft(self) -> float:
        return self.first - self.sent

    @property
    def decode_tps(self) -> float | None:
        # First token to last: the decode speed without the prompt's prefill.
        span = self.last - self.first
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else None

    def as_dict(self) -> dict:
        return {
            "ttft_s": self.ttft,
            "decode_tps": self.decode_tps,
            "elapsed_s": self.done - self.sent,
            "completion_tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "finish_reason": self.finish_reason,
        }


async def timed(side: Side, call: wire.GenerateCall) -> Timing:
    sent = time.perf_counter()
    first = last = None
    parts: list[str] = []
    finished: Finished | None = None
    async for event in side.events(call):
        if isinstance(event, TextDelta | ReasoningDelta) and event.text:
            last = time.perf_counter()
            first = first or last
            parts.append(event.text)
        elif isinstance(event, Finished):
            finished = event
        elif isinstance(event, Failed):
            raise RuntimeError(f"{side.key}: {event.message}")
    if finished is None or first is None or last is None:
        raise RuntimeError(f"{side.key}: the stream ended without text or Finished")
    return Timing(
        sent, first, last, time.perf_counter(), finished.completion_tokens,
        finished.prompt_tokens, finished.cached_tokens, finished.finish_reason, "".join(parts),
    )  # fmt: skip


async def ttft(side: Side, calls: Calls) -> dict:
    run = await timed(side, calls.ttft)
    return {"value": run.ttft * 1000, **run.as_dict()}


async def decode(side: Side, calls: Calls) -> dict:
    run = await timed(side, calls.decode)
    return {"value": run.decode_tps, **run.as_dict(), "text": run.text}


async def aggregate(side: Side, calls: Calls) -> dict:
    # Wall time from the first send to the last Finished, prefill of all streams included.
    start = time.perf_counter()
    runs = await asyncio.gather(*(timed(side, call) for call in calls.streams))
    wall = time.perf_counter() - start
    total = sum(run.tokens for run in runs)
    return {
        "value": total / wall,
        "total_completion_tokens": total,
        "wall_s": wall,
        "runs": [run.as_dict() for run in runs],
    }


MEASUREMENTS: dict[str, Callable] = {
    "ttft_ms": ttft,
    "decode_tps": decode,
    "aggregate_tps": aggregate,
}


async def warm_up(side: Side, calls: Calls) -> None:
    # One at a time: the point is to compile, allocate and fill the prompt cache.
    for call in calls.warm_up:
        await timed(side, call)


async def measure(sides: list[Side], calls: Calls, repeats: int) -> dict[str, dict[str, list]]:
    """Raw runs per side and metric; the sides take turns on each metric."""
    for side in sides:
        await warm_up(side, calls)
    runs: dict[str, dict[str, list]] = {s.key: {m: [] for m in MEASUREMENTS} for s in sides}
    for repeat in range(repeats):
        # Swap which side goes first each repeat, so neither always follows the other.
        order = sides if repeat % 2 == 0 else sides[::-1]
        for metric, run in MEASUREMENTS.items():
            for side in order:
                runs[side.key][metric].append(await run(side, calls))
    return runs


# -- the report -----------------------------------------------------------------------


def medians(runs: dict[str, list]) -> dict[str, float | None]:
    result = {}
    for metric, values in runs.items():
        numbers = [run["value"] for run in values if run["value"] is not None]
        result[metric] = statistics.median(numbers) if numbers else None
    return result


def difference(metric: str, ours: float | None, theirs: float | None) -> str:
    """Worker vs. in-process: % for throughputs, milliseconds for TTFT."""
    if ours is None or theirs is None:
        return "-"
    if metric == "ttft_ms":
        return f"{theirs - ours:+.1f} ms"
    return f"{(theirs - ours) / ours:+.1%}" if ours else "-"


def table(summary: dict[str, dict], config: Config) -> str:
    labels = {
        "decode_tps": f"decode tokens/s, 1 stream × {config.decode_tokens} tokens",
        "ttft_ms": f"TTFT ms, short chat prompt ({config.ttft_tokens} tokens)",
        "aggregate_tps": f"aggregate tokens/s, {config.streams} streams × {config.stream_tokens}",
    }
    ours, theirs = summary["in_process"], summary["worker"]
    lines = [
        f"| metric (median of {config.repeats}) | in-process | worker | difference |",
        "|---|---:|---:|---:|",
    ]
    for metric, label in labels.items():
        cells = [
            fmt(ours[metric]),
            fmt(theirs[metric]),
            difference(metric, ours[metric], theirs[metric]),
        ]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def same_texts(runs: dict[str, dict[str, list]]) -> bool:
    """Greedy decode with the same settings must give the same text on both sides."""
    ours = [run["text"] for run in runs["in_process"]["decode_tps"]]
    theirs = [run["text"] for run in runs["worker"]["decode_tps"]]
    return ours == theirs


def write_report(report: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = OUT_DIR / f"boundary-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    return out


# -- main -----------------------------------------------------------------------------


def run_benchmark(config: Config, path: Path) -> dict:
    sides: list[Side] = []
    try:
        # Loaded one after the other, so neither load slows the other down.
        print(f"== loading {path.name} in this process", flush=True)
        sides.append(InProcess(path))
        print(f"== starting a worker for {path.name}", flush=True)
        sides.append(ThroughWorker(path))
        busy_before = cpu_busy()
        other = OtherLoad(sides[1].pid or os.getpid())
        print(f"== measuring: {config.repeats} repeat(s), sides alternating", flush=True)
        runs = asyncio.run(measure(sides, calls_for(config), config.repeats))
        other_share = other.share()
        described = {side.key: side.describe() for side in sides}
    finally:
        for side in reversed(sides):
            side.close()  # the worker first: it must not outlive the benchmark
    return {
        "summary": {key: medians(by_metric) for key, by_metric in runs.items()},
        "decode_text_identical": same_texts(runs),
        "cpu_busy_before": busy_before,
        "other_cpu_share": other_share,
        "sides": described,
        "runs": runs,
    }


def main() -> int:
    args = parse_args()
    # SystemExit unwinds through the `finally` that stops the worker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    config = QUICK if args.quick else DEFAULT
    if args.repeats:
        config = Config(**{**asdict(config), "repeats": args.repeats})
    started = time.perf_counter()
    result = run_benchmark(config, args.path.resolve())
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "model": str(args.path),
        "config": {"quick": args.quick, **asdict(config)},
        **result,
        "run_seconds": time.perf_counter() - started,
    }
    out = write_report(report)
    print(f"\n{table(result['summary'], config)}\n")
    if not result["decode_text_identical"]:
        print("== warning: the two sides decoded different texts; see the JSON", flush=True)
    for when, share in (
        ("before", result["cpu_busy_before"]),
        ("during", result["other_cpu_share"]),
    ):
        if share is not None and share > 0.1:
            print(f"== warning: other processes used {share:.0%} of the CPU {when} the runs")
    print(f"total {report['run_seconds']:.0f}s; results in {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; worker stopped", file=sys.stderr)
        sys.exit(130)
