"""One model across ranks: a two-rank mx.distributed worker against one rank.

    .venv/bin/python bench/distributed.py            # 5 repeats
    .venv/bin/python bench/distributed.py --quick    # 1 repeat, shorter answers

Both sides are `manage.py modelworker --distributed` (inference/engine/process/distributed.py),
reached by a Supervisor that names them in its remote workers, as MLXLAB_WORKERS does:
(a) one rank (a hostfile of one host: the same worker with no ring), (b) two ranks joined
by MLX's ring backend, each on a host of its own (network namespaces on one bridge,
tests/hosts.py; loopback where none can be made, and the report says so). The difference
is what the ring costs: two collectives a layer, plus the worker's own two a token.

The default model's 9 query heads and 3 key-value heads do not split over two ranks, so
both sides serve the copy with a fourth key-value head and its 3 query heads, all zero,
that a two-rank worker pads itself (inference/engine/acceleration/head_padding.py): the same function,
in a shape two ranks can share. Greedy decode must give
the same text on both sides. On a 2-core CPU the two ranks share the cores the one rank
had to itself, so (b) may well be slower: the figure says what the link costs, not a gain.
"""

# ruff: noqa: E402  (sys.path first, as bench/boundary.py)
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

from boundary import DEFAULT, MODEL_DIR, QUICK, Calls, Config, chat_call, timed
from cpu import OtherLoad, cpu_busy
from remote_worker import SECRET, Remote
from run import OUT_DIR, machine
from workload import DECODE_PROMPTS, WARMUP_PROMPT

from inference.engine.acceleration.head_padding import shardable_path
from tests.hosts import Network, namespaces_unavailable, unfence

RING_PORT, WORKER_PORT = 5621, 7411


class Group:
    """`ranks` ranks of `manage.py modelworker --distributed`, each on a host of its own
    (on loopback where no namespace can be made); rank 0 serves at `address`."""

    def __init__(self, path: Path, ranks: int, why_loopback: str | None) -> None:
        self.network = None if why_loopback else Network(f"bench{ranks}", ranks)
        ips = [h.address for h in self.network.hosts] if self.network else ["127.0.0.1"] * ranks
        ports = [RING_PORT + 10 * ranks + r for r in range(ranks)]
        self.address = f"tcp://{ips[0]}:{WORKER_PORT + ranks}"
        hostfile = OUT_DIR / f"ring-{ranks}.json"
        hostfile.write_text(
            json.dumps([[f"{ip}:{port}"] for ip, port in zip(ips, ports, strict=True)])
        )
        argv = [sys.executable, str(ROOT / "manage.py"), "modelworker", "--distributed",
                "--model", path.name, "--path", str(path), "--listen", self.address]  # fmt: skip
        env = {**os.environ, "MLX_HOSTFILE": str(hostfile), "MLXLAB_WORKER_SECRET": SECRET}
        self.logs = [OUT_DIR / f"ring-{ranks}-rank{r}.log" for r in range(ranks)]
        self.processes: list[subprocess.Popen] = []
        for rank in range(ranks):
            rank_env = {**env, "MLX_RANK": str(rank)}
            if self.network:
                host = self.network.hosts[rank]
                self.processes.append(host.popen(argv, log=self.logs[rank], env=rank_env, cwd=ROOT))
            else:
                with open(self.logs[rank], "ab") as out:
                    self.processes.append(subprocess.Popen(
                        argv, cwd=ROOT, env=rank_env, stdout=out, stderr=out
                    ))  # fmt: skip
        self._wait(f"(pid {self.processes[0].pid}, rank 0 of {ranks})")

    def _wait(self, mark: str) -> None:
        deadline = time.monotonic() + 240
        while mark not in self.logs[0].read_text(errors="replace"):
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the ring did not start: see {self.logs}")
            time.sleep(0.3)

    @property
    def pid(self) -> int:
        return self.processes[0].pid

    def close(self) -> None:
        if self.processes and self.processes[0].poll() is None:
            self.processes[0].terminate()  # rank 0 tells the others to stop
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        if self.network:
            self.network.down()


class Ranks(Remote):
    def __init__(self, key: str, path: Path, group: Group) -> None:
        self.key, self.group = key, group
        super().__init__(path, group.address)


def calls_for(config: Config) -> Calls:
    """One stream at a time: a distributed worker serves requests one after another."""
    return Calls(
        ttft=chat_call(WARMUP_PROMPT, config.ttft_tokens),
        decode=chat_call(DECODE_PROMPTS[0], config.decode_tokens),
        streams=[],
        warm_up=[chat_call(m, 2) for m in (WARMUP_PROMPT, DECODE_PROMPTS[0])],
    )


async def measure(sides: list[Ranks], calls: Calls, repeats: int) -> dict[str, dict]:
    for side in sides:
        for call in calls.warm_up:
            await timed(side, call)
    runs = {side.key: {"decode_tps": [], "ttft_ms": []} for side in sides}
    for repeat in range(repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:  # neither always goes first
            decode = await timed(side, calls.decode)
            runs[side.key]["decode_tps"].append({"value": decode.decode_tps,
                                                 **decode.as_dict(), "text": decode.text})  # fmt: skip
            first = await timed(side, calls.ttft)
            runs[side.key]["ttft_ms"].append({"value": first.ttft * 1000, **first.as_dict()})
    return runs


def median(runs: list[dict]) -> float | None:
    values = [run["value"] for run in runs if run["value"] is not None]
    return statistics.median(values) if values else None


def run_benchmark(config: Config, source: Path) -> dict:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    # Both sides serve the copy two ranks can shard, so that they compute the same shape.
    path = shardable_path(source, 2, OUT_DIR)
    why_loopback = namespaces_unavailable()
    groups: list[Group] = []
    sides: list[Ranks] = []
    try:
        for ranks in (1, 2):  # started one after the other, so neither load slows the other
            print(f"== {ranks} rank(s) of {path.name}", flush=True)
            groups.append(Group(path, ranks, why_loopback))
            sides.append(Ranks(f"{ranks}_rank{'s' if ranks > 1 else ''}", path, groups[-1]))
        busy_before = cpu_busy()
        other = OtherLoad(groups[-1].pid)
        runs = asyncio.run(measure(sides, calls_for(config), config.repeats))
        other_share = other.share()
    finally:
        for side in sides:
            side.close()
        for group in groups:
            group.close()
        unfence()
    texts = {key: [run["text"] for run in by["decode_tps"]] for key, by in runs.items()}
    return {
        "model": str(path),
        "summary": {key: {m: median(r) for m, r in by.items()} for key, by in runs.items()},
        "decode_text_identical": texts["1_rank"] == texts["2_ranks"],
        "ranks_on_loopback_because": why_loopback,
        "cpu_busy_before": busy_before,
        "other_cpu_share": other_share,
        "runs": runs,
    }


def table(summary: dict[str, dict], config: Config) -> str:
    one, two = summary["1_rank"], summary["2_ranks"]
    lines = [f"| metric (median of {config.repeats}) | 1 rank | 2 ranks | difference |",
             "|---|---:|---:|---:|"]  # fmt: skip
    for metric, label in (("decode_tps", f"decode tokens/s, 1 stream × {config.decode_tokens}"),
                          ("ttft_ms", f"TTFT ms, short chat prompt ({config.ttft_tokens} tokens)")):  # fmt: skip
        a, b = one[metric], two[metric]
        if a is None or b is None:
            change = "-"
        else:
            change = f"{b - a:+.1f} ms" if metric == "ttft_ms" else f"{(b - a) / a:+.1%}"
        cells = ["-" if v is None else f"{v:.2f}" for v in (a, b)]
        lines.append(f"| {label} | {' | '.join(cells)} | {change} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, fewer tokens")
    parser.add_argument("--repeats", type=int, help="override the number of repeats")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    config = QUICK if args.quick else DEFAULT
    if args.repeats:
        config = Config(**{**asdict(config), "repeats": args.repeats})
    result = run_benchmark(config, MODEL_DIR.resolve())
    report = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": {"quick": args.quick, **asdict(config)},
        **result,
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = OUT_DIR / f"distributed-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    where = result["ranks_on_loopback_because"] or "a host (network namespace) per rank"
    print(f"\nranks: {where}")
    print(table(result["summary"], config))
    share = result["other_cpu_share"]
    if share and share > 0.1:
        print(f"warning: other processes used {share:.0%} of the CPU meanwhile")
    print(f"greedy decode text identical: {result['decode_text_identical']}; results in {out}")
    return 0 if result["decode_text_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
