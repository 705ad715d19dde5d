"""Soak and faults (`make soak`): a lab on loopback, under load, while its parts are killed.

It starts its own lab with `manage.py runlab` (Daphne, a Celery worker and a Redis of its
own, with throwaway data), then, in turn:

1. 64 streams across the four surfaces, and 32 clients that hang up mid-stream;
2. streams in flight when the model's worker is SIGKILLed, then streams after it;
3. Redis restarted while streams run, then a job submitted;
4. the Celery worker SIGKILLed during a quantize job, then another quantize job;
5. one tenant's streams alone, then beside a tenant limited to 2 requests a minute that
   sends 16 at once, then beside clients pushing oversized and slow bodies
   (soak_neighbours.py).

It prints what completed, the errors by type and what must be zero: 5xx answers, slots
still held after the load, jobs not in a final state a minute after the last fault, rows
lost (stored responses and conversations, counted before and after), a limited tenant
that got no 429, a request body spooled past its limit, and a tenant whose p95 time to
first token beside its neighbours left the spread of its runs alone.
The figures also go to var/bench/soak.json. This is a bench script, not a test: nothing
in it is timed against a limit, and it asks the same of every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from servers import MODEL_DIR, MODEL_NAME, ROOT, free_port
from soak_clients import Clients, Outcome, Phase, load
from soak_neighbours import BODY_SECONDS, neighbours

OUT = ROOT / "var" / "bench" / "soak.json"
USER, PASSWORD = "soak", "soak-password-1"
FINAL = ("succeeded", "failed", "cancelled")


# -- the lab under test --------------------------------------------------------------


class Lab:
    """`manage.py runlab` in a throwaway home, with a Redis of its own on a free port."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "MLXLAB_VAR_DIR": str(home),
            "MLXLAB_DB_PATH": str(home / "db.sqlite3"),
            "MLXLAB_MODELS_DIR": str(MODEL_DIR.parent),
            "MLXLAB_DEFAULT_MODEL": MODEL_NAME,
            "MLXLAB_PRELOAD": "1",
            "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "MLXLAB_REQUEST_BODY_SECONDS": str(BODY_SECONDS),
        }
        self.process: subprocess.Popen | None = None
        self.key = ""
        self.neighbours: dict = {}  # the neighbours phase's figures
        self.body_limit = 8 << 20  # MLXLAB_MAX_REQUEST_BYTES's default, on /v1

    def manage(self, *args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT, env={**self.env, **env}, check=True, capture_output=True, text=True,
        )  # fmt: skip
        return done.stdout.strip()

    def start(self) -> None:
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("add_model", str(MODEL_DIR), "--name", MODEL_NAME)
        self.manage(
            "createsuperuser", "--noinput", "--email", "soak@localhost",
            DJANGO_SUPERUSER_USERNAME=USER, DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        )  # fmt: skip
        self.key = self.manage("create_api_key", "--user", USER, "--label", "soak")
        log = open(self.home / "lab.log", "wb")  # noqa: SIM115 (open for the lab's life)
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runlab", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.wait(lambda: MODEL_NAME in self.get("/health").get("models_loaded", []), 300)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)

    def get(self, path: str) -> dict:
        try:
            answer = httpx.get(f"{self.url}{path}", headers=self.headers, timeout=10)
            return answer.json()
        except (httpx.HTTPError, ValueError):
            return {}

    def post(self, path: str, body: dict) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=self.headers, timeout=60)

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"}

    def wait(self, ready: Callable[[], bool], timeout: float) -> float:
        """Seconds until `ready()`; raises after `timeout`."""
        started = time.monotonic()
        while not ready():
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"not ready after {timeout} s; see {self.home / 'lab.log'}")
            time.sleep(0.25)
        return time.monotonic() - started

    def until(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Whether `ready()` came true within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        return True

    def child(self, word: str) -> int | None:
        """The pid of runlab's child whose command line holds `word` (its newest one), or
        None while there is none (between a child's exit and its restart)."""
        found = subprocess.run(
            ["pgrep", "-n", "-P", str(self.process.pid), "-f", word],
            capture_output=True, text=True,
        )  # fmt: skip
        pids = found.stdout.split()
        return int(pids[0]) if pids else None

    def worker_pid(self) -> int | None:
        workers = self.get("/engine").get("workers", [])
        return next((w["pid"] for w in workers if w["model"] == MODEL_NAME), None)

    def rows(self) -> dict[str, set]:
        with sqlite3.connect(self.env["MLXLAB_DB_PATH"]) as db:
            return {
                table: {row[0] for row in db.execute(f"SELECT id FROM {table}")}
                for table in ("inference_storedresponse", "lab_conversation")
            }

    def jobs(self) -> list[dict]:
        return self.get("/api/jobs").get("results", [])


# -- the phases ------------------------------------------------------------------------


async def steady_load(lab: Lab, c: Clients, args) -> Phase:
    phase = Phase(f"{args.streams} streams and {args.hang_ups} hang-ups")
    started = time.monotonic()
    phase.outcomes = await asyncio.gather(*load(c, args.streams, args.hang_ups))
    phase.notes.append(f"took {time.monotonic() - started:.1f} s")
    return phase


async def worker_killed(lab: Lab, c: Clients, args) -> Phase:
    phase = Phase("model worker SIGKILLed mid-load")
    pid = lab.worker_pid()
    c.opened = c.streaming = 0
    running = [asyncio.ensure_future(call) for call in load(c, 16, offset=100)]
    while c.opened < 16 or c.streaming < 4:  # every answer started, some mid-text
        await asyncio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    phase.notes.append(f"killed worker pid {pid} with {c.streaming} of 16 streams carrying text")
    after = await asyncio.gather(*load(c, 16, offset=200))  # these wait for the restart
    before = await asyncio.gather(*running)
    phase.outcomes = [*before, *after]
    for name, group in (("in flight at the kill", before), ("sent after it", after)):
        labels = dict(Counter(o.label for o in group))
        phase.notes.append(f"16 streams {name}: {labels}")
    phase.notes.append(f"all done {time.monotonic() - killed:.1f} s after the kill")
    return phase


async def redis_restarted(lab: Lab, c: Clients, args) -> Phase:
    phase = Phase("Redis restarted under load")
    running = [asyncio.ensure_future(call) for call in load(c, 8, offset=300)]
    pid = lab.child("redis-server")
    os.kill(pid, signal.SIGTERM)
    gone = time.monotonic()
    while lab.child("redis-server") in (pid, None):
        await asyncio.sleep(0.1)
    phase.notes.append(f"redis pid {pid} stopped; runlab started {lab.child('redis-server')}")
    phase.outcomes = await asyncio.gather(*running)
    answer = await asyncio.to_thread(
        lab.post, "/api/jobs",
        {"kind": "quantize", "params": {"model": MODEL_NAME, "name": "soak-after-redis"}},
    )  # fmt: skip
    phase.outcomes.append(Outcome("completed" if answer.status_code == 202 else
                                  f"job submission HTTP {answer.status_code}", answer.status_code))  # fmt: skip
    phase.notes.append(
        f"a job submitted {time.monotonic() - gone:.1f} s after the stop: {answer.status_code}"
    )
    return phase


async def celery_killed(lab: Lab, c: Clients, args) -> Phase:
    phase = Phase("Celery worker SIGKILLed during a quantize job")
    await asyncio.to_thread(lab.wait, lambda: all(j["status"] in FINAL for j in lab.jobs()), 600)
    answer = lab.post(
        "/api/jobs", {"kind": "quantize", "params": {"model": MODEL_NAME, "name": "soak-killed"}}
    )
    job_id = answer.json()["id"]

    def running() -> bool:
        job = lab.get(f"/api/jobs/{job_id}")
        return job.get("status") == "running" and job.get("progress", 0) > 0

    await asyncio.to_thread(lab.wait, running, 300)
    pid = lab.child("celery")
    os.kill(pid, signal.SIGKILL)
    phase.notes.append(f"killed celery pid {pid} with job {job_id} running")
    after = lab.post(
        "/api/jobs", {"kind": "quantize", "params": {"model": MODEL_NAME, "name": "soak-after"}}
    )
    phase.outcomes.append(
        Outcome("completed" if after.status_code == 202 else f"HTTP {after.status_code}",
                after.status_code)
    )  # fmt: skip
    phase.notes.append(f"a job submitted right after the kill: {after.status_code}")
    return phase


# -- what must be zero -----------------------------------------------------------------


def slots_held(lab: Lab) -> dict:
    """Streams the web process holds and requests the worker holds, once the load is over."""

    def held() -> tuple[int, int]:
        return lab.get("/health").get("in_flight", -1), lab.get("/stats").get("in_flight", -1)

    lab.until(lambda: held() == (0, 0), 30)
    web, engine = held()
    return {"web_streams": web, "engine_requests": engine}


def jobs_not_final(lab: Lab) -> tuple[int, list[dict]]:
    lab.until(lambda: all(j["status"] in FINAL for j in lab.jobs()), 60)
    jobs = [
        {"name": j["params"].get("name"), "status": j["status"], "error": j["error"]}
        for j in lab.jobs()
    ]
    return sum(j["status"] not in FINAL for j in jobs), jobs


def seed(lab: Lab) -> None:
    """Rows that exist before the faults: conversations and stored responses."""
    for i in range(8):
        lab.post("/api/conversations", {"title": f"soak {i}", "model": MODEL_NAME})
        lab.post("/v1/responses", {"model": MODEL_NAME, "input": f"Hi {i}", "max_output_tokens": 2})


async def soak(args) -> dict:
    home = Path(tempfile.mkdtemp(prefix="mlxlab-soak-"))
    lab = Lab(home)
    print(f"starting a lab on {lab.url} in {home} ...", flush=True)
    lab.start()
    try:
        seed(lab)
        before = lab.rows()
        c = Clients(lab)
        phases = []
        for run in (steady_load, worker_killed, redis_restarted, celery_killed, neighbours):
            print(f"- {run.__name__} ...", flush=True)
            phases.append(await run(lab, c, args))
            print(f"  {json.dumps(phases[-1].summary())}", flush=True)
        slots = slots_held(lab)
        not_final, jobs = jobs_not_final(lab)
        after = lab.rows()
        stored = {o.response_id for p in phases for o in p.outcomes if o.response_id}
        lost = {table: len(before[table] - after[table]) for table in before}
        lost["completed_responses_not_stored"] = len(stored - after["inference_storedresponse"])
    finally:
        lab.stop()
    outcomes = [o for p in phases for o in p.outcomes]
    totals = Phase("all", outcomes).summary()
    return {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "phases": {p.name: p.summary() for p in phases},
        "completed": totals["completed"],
        "hung_up": totals["hung_up"],
        "errors_by_type": totals["errors"],
        "5xx": totals["5xx"],
        "slots_held_after_load": slots,
        "jobs_not_final_after_a_minute": not_final,
        "jobs": jobs,
        "rows_before": {table: len(ids) for table, ids in before.items()},
        "rows_lost": lost,
        "neighbours": lab.neighbours,
        "home": str(home),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--hang-ups", type=int, default=32)
    report = asyncio.run(soak(parser.parse_args()))
    near = report["neighbours"]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    zero = {
        "5xx answers": report["5xx"],
        "slots still held": sum(report["slots_held_after_load"].values()),
        "jobs not final after a minute": report["jobs_not_final_after_a_minute"],
        "rows lost": sum(report["rows_lost"].values()),
        "limited tenant refused nothing": int(
            not any(label.startswith("HTTP 429") for label in near["limited_answers"])
        ),
        "body spooled past its limit": int(near["largest_spool_bytes"] > near["body_limit_bytes"]),
        "tenant slower beside its neighbours": sum(
            near[f"beside_{what}_p95_ttft_s"] > near["allowed_p95_ttft_s"]
            for what in ("limited", "bodies")
        ),
    }
    print(f"\ncompleted {report['completed']}, hung up {report['hung_up']}")
    print(f"errors by type: {report['errors_by_type'] or 'none'}")
    for label, value in zero.items():
        print(f"{label}: {value}{'' if value == 0 else '  <-- must be 0'}")
    print(f"(full report: {OUT})")
    return 0 if not any(zero.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
