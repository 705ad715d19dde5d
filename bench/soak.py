"""Soak and faults (`make soak`): a lab on loopback, under load, while its parts are killed.

It starts its own lab with `manage.py runlab` (Daphne, a Celery worker and a Redis of its
own, with throwaway data), then, in turn:

1. 64 streams across the four surfaces, and 32 clients that hang up mid-stream;
2. streams in flight when the model's worker is SIGKILLed, then streams after it;
3. Redis restarted while streams run, then a job submitted;
4. the Celery worker SIGKILLed during a quantize job, then another quantize job.

It prints what completed, the errors by type and what must be zero: 5xx answers, slots
still held after the load, jobs not in a final state a minute after the last fault, and
rows lost (stored responses and conversations, counted before and after).
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anthropic
import httpx
import openai
from servers import MODEL_DIR, MODEL_NAME, ROOT, free_port

OUT = ROOT / "var" / "bench" / "soak.json"
USER, PASSWORD = "soak", "soak-password-1"
FINAL = ("succeeded", "failed", "cancelled")
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
        }
        self.process: subprocess.Popen | None = None
        self.key = ""

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

    def child(self, word: str) -> int:
        """The pid of runlab's child whose command line holds `word` (its newest one)."""
        found = subprocess.run(
            ["pgrep", "-n", "-P", str(self.process.pid), "-f", word],
            capture_output=True, text=True,
        )  # fmt: skip
        return int(found.stdout.split()[0])

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


# -- clients, one per surface, each through its official SDK ---------------------------


class Clients:
    def __init__(self, lab: Lab) -> None:
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
    while lab.child("redis-server") == pid:
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
        for run in (steady_load, worker_killed, redis_restarted, celery_killed):
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
        "home": str(home),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--hang-ups", type=int, default=32)
    report = asyncio.run(soak(parser.parse_args()))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    zero = {
        "5xx answers": report["5xx"],
        "slots still held": sum(report["slots_held_after_load"].values()),
        "jobs not final after a minute": report["jobs_not_final_after_a_minute"],
        "rows lost": sum(report["rows_lost"].values()),
    }
    print(f"\ncompleted {report['completed']}, hung up {report['hung_up']}")
    print(f"errors by type: {report['errors_by_type'] or 'none'}")
    for label, value in zero.items():
        print(f"{label}: {value}{'' if value == 0 else '  <-- must be 0'}")
    print(f"(full report: {OUT})")
    return 0 if not any(zero.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
