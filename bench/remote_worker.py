"""A model worker on another host against a local one: what the TCP link costs.

    .venv/bin/python bench/remote_worker.py            # 5 repeats
    .venv/bin/python bench/remote_worker.py --quick    # 1 repeat, shorter answers

(a) local: the worker a Supervisor spawns, over ipc:// (the web process's own path);
(b) remote: `manage.py modelworker --listen tcp://HOST:PORT` started on another host (a
    network namespace joined by a veth pair, tests/hosts.py), reached by a Supervisor that
    names it in its remote workers, over CURVE with the shared secret: the web tier's path
    with MLXLAB_WORKERS. Where namespaces cannot be made, the worker listens on loopback
    TCP instead (still CURVE), and the report says so.
Both get the same GenerateCall values (bench/boundary.py's workload), take turns and are
warmed up first; greedy decode must give the same text on both. Target: within 5%.
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
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

from boundary import (
    DEFAULT,
    MODEL_DIR,
    QUICK,
    SOCKET_DIR,
    Config,
    ThroughWorker,
    calls_for,
    medians,
    worker_command,
)
from boundary import measure as measure_sides
from cpu import OtherLoad, cpu_busy
from run import OUT_DIR, machine

from inference.workers.supervisor import Supervisor
from inference.workers.worker import SupervisorConfig
from tests.hosts import namespaces_unavailable, new_host, unfence

SECRET = "bench-remote-worker-secret-0123456789"
PORT = 7401


class Local(ThroughWorker):
    key = "local"


class Remote(ThroughWorker):
    """A Supervisor whose model is served by a worker it did not start."""

    key = "remote"

    def __init__(self, path: Path, address: str) -> None:
        self.model, self.path, self.address = path.name, str(path), address
        self.socket_path = None
        config = SupervisorConfig(
            command=worker_command, socket_dir=SOCKET_DIR, idle_seconds=0,
            remote={self.model: address}, secret=SECRET,
        )  # fmt: skip
        self.supervisor = Supervisor(config)
        try:
            self.supervisor.ensure(self.model, self.path)
        except BaseException:
            self.supervisor.shutdown()
            raise


class RemoteHost:
    """The worker's host: a namespace, or loopback where none can be made."""

    def __init__(self, path: Path) -> None:
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        self.why_loopback = namespaces_unavailable()
        self.host = None if self.why_loopback else new_host("bench")
        ip = self.host.address if self.host else "127.0.0.1"
        self.address = f"tcp://{ip}:{PORT}"
        argv = [sys.executable, str(ROOT / "manage.py"), "modelworker", "--model", path.name,
                "--path", str(path), "--listen", self.address]  # fmt: skip
        env = {**os.environ, "MLXLAB_WORKER_SECRET": SECRET}
        self.log = OUT_DIR / "remote-worker.log"
        self.process = None
        if self.host:
            try:
                self.process = self.host.popen(argv, log=self.log, env=env, cwd=ROOT)
            except BaseException:
                self.close()
                raise
        else:
            with open(self.log, "ab") as out:
                self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
        deadline = time.monotonic() + 180
        while f"serving at {self.address} (pid {self.process.pid})" not in self.log.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the remote worker did not start: see {self.log}")
            time.sleep(0.2)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)
        if self.host:
            self.host.down()
            unfence()


def table(summary: dict[str, dict], config: Config) -> str:
    labels = {
        "decode_tps": f"decode tokens/s, 1 stream × {config.decode_tokens} tokens",
        "ttft_ms": f"TTFT ms, short chat prompt ({config.ttft_tokens} tokens)",
        "aggregate_tps": f"aggregate tokens/s, {config.streams} streams × {config.stream_tokens}",
    }
    local, remote = summary["local"], summary["remote"]
    lines = [
        f"| metric (median of {config.repeats}) | local worker | remote worker | difference |",
        "|---|---:|---:|---:|",
    ]
    for metric, label in labels.items():
        ours, theirs = local[metric], remote[metric]
        if ours is None or theirs is None:
            change = "-"
        elif metric == "ttft_ms":
            change = f"{theirs - ours:+.1f} ms"
        else:
            change = f"{(theirs - ours) / ours:+.1%}"
        cells = ["-" if v is None else f"{v:.2f}" for v in (ours, theirs)]
        lines.append(f"| {label} | {' | '.join(cells)} | {change} |")
    return "\n".join(lines)


def round_trip_us(side: ThroughWorker, count: int = 200) -> float:
    """The median of `count` report round trips (web side to worker and back), in µs:
    what one frame each way costs on the link, apart from any generation."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        side.supervisor.live_status(side.model, 5.0).result(10)
        times.append((time.perf_counter() - started) * 1e6)
    return statistics.median(times)


def run_benchmark(config: Config, path: Path) -> dict:
    host = RemoteHost(path)
    sides = []
    try:
        print(f"== a worker for {path.name} at {host.address}", flush=True)
        sides.append(Remote(path, host.address))
        print(f"== a local worker for {path.name}", flush=True)
        sides.append(Local(path))
        busy_before = cpu_busy()
        other = OtherLoad(host.process.pid)
        runs = asyncio.run(measure_sides(sides, calls_for(config), config.repeats))
        round_trips = {side.key: round_trip_us(side) for side in sides}
        other_share = other.share()
    finally:
        for side in sides:
            side.close()
        host.close()
    texts = {key: [r["text"] for r in by_metric["decode_tps"]] for key, by_metric in runs.items()}
    return {
        "summary": {key: medians(by_metric) for key, by_metric in runs.items()},
        "decode_text_identical": texts["local"] == texts["remote"],
        "report_round_trip_us": round_trips,
        "remote_address": host.address,
        "remote_on_loopback_because": host.why_loopback,
        "cpu_busy_before": busy_before,
        "other_cpu_share": other_share,
        "runs": runs,
    }


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
    out = OUT_DIR / f"remote-worker-{stamp}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    where = result["remote_on_loopback_because"] or "another network namespace"
    print(f"\nremote worker at {result['remote_address']} ({where})")
    print(table(result["summary"], config))
    trips = result["report_round_trip_us"]
    print(f"| report round trip µs (median of 200) | {trips['local']:.0f} | {trips['remote']:.0f} "
          f"| {trips['remote'] - trips['local']:+.0f} µs |")  # fmt: skip
    share = result["other_cpu_share"]
    if share and share > 0.1:
        print(f"warning: other processes used {share:.0%} of the CPU meanwhile")
    print(f"greedy decode text identical: {result['decode_text_identical']}; results in {out}")
    return 0 if result["decode_text_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
