"""Model workers under faults, on real worker processes behind a real Daphne.

A module of its own with its own server: its tests kill workers, which must not
disturb the session's shared server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.conftest import DEFAULT_MODEL, _manage, server_home, start_daphne

SECOND, THIRD, BROKEN = "second-model", "third-model", "broken-model"
LONG = [{"role": "user", "content": "Write a long story about a dragon who learns to sail."}]
STREAM_MESSAGE = (
    "inference engine unavailable: the engine worker stopped while streaming this response "
    "(signal {}); it is being respawned"
)
MID_REQUEST = (
    "inference engine unavailable: the engine worker stopped mid-request; "
    "respawning — retry shortly"
)


def _copy(source: Path, folder: Path, *, broken: bool = False) -> Path:
    """The default model's files under another name (symlinks; weights garbage if `broken`)."""
    folder.mkdir(parents=True)
    for item in source.iterdir():
        if broken and item.suffix == ".safetensors":
            (folder / item.name).write_bytes(b"not a safetensors file")
        else:
            (folder / item.name).symlink_to(item)
    return folder


class Lab:
    def __init__(self, server) -> None:
        self.server = server
        self.url = server.url
        self.http = httpx.Client(base_url=server.url, timeout=120)
        self.staff = server.staff_client(timeout=120)  # /engine and /stats are for staff
        self.openai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0)
        self.anthropic = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)

    def engine(self) -> dict:
        return self.staff.get("/engine").json()

    def worker(self, model: str) -> dict | None:
        workers = self.engine()["workers"]
        return next((w for w in workers if w["model"] == model and w["role"] == "primary"), None)

    def companion(self) -> dict | None:
        """The draft model's companion worker (one at most here), as /engine lists it."""
        return next((w for w in self.engine()["workers"] if w["role"] == "companion"), None)

    def ready(self, model: str, timeout: float = 120) -> dict:
        """Make `model` resident (a request loads it) and return its worker once ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            worker = self.worker(model)
            if worker is not None and worker["state"] == "ready":
                return worker
            if worker is None:
                self.http.post(
                    "/v1/completions", json={"model": model, "prompt": "Hi", "max_tokens": 1}
                )
            time.sleep(0.2)
        pytest.fail(f"the worker for {model} did not become ready: {self.engine()}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, model_folder, redis_url):
    home = tmp_path_factory.mktemp("workers")
    env = server_home(home, model_folder, MAX_LOADED_MODELS="2", ENGINE_WAIT_SECONDS="60")
    for name in (SECOND, THIRD):
        _manage(env, "add_model", str(_copy(model_folder, home / name)), "--name", name)
    broken = _copy(model_folder, home / BROKEN, broken=True)
    _manage(env, "add_model", str(broken), "--name", BROKEN)
    server = start_daphne(home, env, "workers-daphne")
    try:
        yield Lab(server)
    finally:
        server.stop()


class HealthWatch:
    """Polls /health from a thread; every answer must come within a second."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[int] = []
        self.slow: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=1.0) as client:
            while not self._stop.is_set():
                try:
                    self.answers.append(client.get(f"{self.url}/health").status_code)
                except httpx.HTTPError as error:
                    self.slow.append(repr(error))
                self._stop.wait(0.1)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


class SecondStream(threading.Thread):
    """A stream on the second model, in flight while the default model's worker dies."""

    def __init__(self, lab: Lab) -> None:
        super().__init__(daemon=True)
        self.lab = lab
        self.text = ""
        self.finish_reason = None
        self.error: Exception | None = None
        self.started = threading.Event()

    def run(self) -> None:
        try:
            stream = self.lab.openai.chat.completions.create(
                model=SECOND, messages=LONG, max_tokens=40, temperature=0, stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    self.text += chunk.choices[0].delta.content
                    self.started.set()
                if chunk.choices and chunk.choices[0].finish_reason:
                    self.finish_reason = chunk.choices[0].finish_reason
        except Exception as error:
            self.error = error
            self.started.set()


def _stream_and_kill(lab: Lab, surface: str, kill) -> tuple[int, object]:
    """Stream on `surface`, kill the worker after a few tokens; (tokens seen, the ending)."""
    seen = 0
    common = {"model": DEFAULT_MODEL, "max_tokens": 300, "stream": True}
    if surface == "chat":
        stream = lab.openai.chat.completions.create(messages=LONG, temperature=0, **common)
    elif surface == "completions":
        stream = lab.openai.completions.create(prompt="Once upon a time", temperature=0, **common)
    elif surface == "responses":
        stream = lab.openai.responses.create(
            model=DEFAULT_MODEL, input=LONG[0]["content"], max_output_tokens=300, stream=True
        )
    else:
        stream = lab.anthropic.messages.create(messages=LONG, **common)
    last = None
    try:
        for event in stream:
            last = event
            seen += 1
            if seen == 4:
                kill()
    except (openai.APIError, anthropic.APIStatusError) as error:
        return seen, error
    return seen, last


KILLS = [
    (s, sig)
    for s in ("chat", "completions", "responses", "messages")
    for sig in ("SIGKILL", "SIGSEGV")
]


@pytest.mark.parametrize(("surface", "signal_name"), KILLS)
def test_a_worker_killed_mid_stream_ends_the_stream_with_the_protocols_error(
    lab, surface, signal_name
):
    lab.ready(SECOND)
    before = lab.ready(DEFAULT_MODEL)
    second = SecondStream(lab)
    with HealthWatch(lab.url) as health:
        second.start()
        assert second.started.wait(60)
        seen, ending = _stream_and_kill(
            lab, surface, lambda: os.kill(before["pid"], getattr(signal, signal_name))
        )
        second.join(120)
    expected = STREAM_MESSAGE.format(signal_name)
    assert seen >= 4
    if surface in ("chat", "completions"):
        assert isinstance(ending, openai.APIError) and ending.message == expected
        assert ending.body == {"message": expected, "type": "engine_unavailable"}
    elif surface == "responses":
        assert ending.type == "error"
        assert (ending.code, ending.message, ending.param) == ("engine_unavailable", expected, None)
    else:
        assert isinstance(ending, anthropic.APIStatusError)
        assert ending.body == {"type": "error", "error": {"type": "api_error", "message": expected}}

    # The other model's stream went on, /health answered throughout, the worker came back.
    assert second.error is None and second.finish_reason == "length" and second.text
    assert not health.slow and health.answers
    report = lab.engine()
    assert report["last_exit"] == {"code": None, "signal": signal_name}
    assert report["restarts"] == before["restarts"] + 1
    reply = lab.openai.chat.completions.create(
        model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3
    )
    assert reply.choices[0].message.content
    after = lab.worker(DEFAULT_MODEL)
    assert after["state"] == "ready" and after["pid"] != before["pid"]


def _kill_once_busy(lab: Lab, pid: int) -> None:
    """SIGKILL the worker once its engine holds the request, and its acceptance has had
    time to reach the web process: a timer raced a fast worker (it answered in full before
    it fired), and a kill before the acceptance arrived sent the request to the successor
    (a request the killed worker never took goes once more)."""

    def engine_holds_one() -> bool:
        models = lab.staff.get("/stats").json().get("models", {})
        return bool(models.get(DEFAULT_MODEL, {}).get("in_flight"))

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not engine_holds_one():
            time.sleep(0.02)
        time.sleep(0.3)  # the acceptance is on its way: one ZeroMQ hop
        os.kill(pid, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def test_a_worker_killed_before_the_answer_starts_is_a_502_in_each_protocols_shape(lab):
    worker = lab.ready(DEFAULT_MODEL)
    _kill_once_busy(lab, worker["pid"])
    with pytest.raises(openai.APIStatusError) as raised:
        lab.openai.chat.completions.create(model=DEFAULT_MODEL, messages=LONG, max_tokens=300)
    assert raised.value.status_code == 502
    body = raised.value.response.json()
    assert body == {
        "error": {"message": MID_REQUEST, "type": "engine_unavailable", "state": "restarting"}
    }

    worker = lab.ready(DEFAULT_MODEL)
    _kill_once_busy(lab, worker["pid"])
    with pytest.raises(anthropic.APIStatusError) as raised:
        lab.anthropic.messages.create(model=DEFAULT_MODEL, messages=LONG, max_tokens=300)
    assert raised.value.status_code == 502
    assert raised.value.response.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": MID_REQUEST},
    }
    lab.ready(DEFAULT_MODEL)


def _send_while_stopped(lab: Lab, signal_name: str) -> tuple[object, dict]:
    """A request sent to a worker frozen by SIGSTOP (so it is never accepted), then the
    worker ended by `signal_name`; (the answer or the error, the worker before)."""
    worker = lab.ready(DEFAULT_MODEL)
    os.kill(worker["pid"], signal.SIGSTOP)
    outcome: list = []

    def send() -> None:
        try:
            outcome.append(
                lab.openai.chat.completions.create(
                    model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Hi"}],
                    max_tokens=3, temperature=0,
                )
            )  # fmt: skip
        except openai.APIStatusError as error:
            outcome.append(error)

    held = lab.http.get("/health").json()["in_flight"]  # an earlier test's may be ending
    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 30
    while lab.http.get("/health").json()["in_flight"] <= held:  # on its way to the worker
        assert time.monotonic() < deadline, "the request never reached the web process"
        time.sleep(0.05)
    os.kill(worker["pid"], getattr(signal, signal_name))
    os.kill(worker["pid"], signal.SIGCONT)  # a pending SIGSEGV lands once it runs again
    sender.join(120)
    return outcome[0], worker


def test_a_request_the_killed_worker_never_took_goes_to_its_successor(lab):
    """SIGKILL is the OOM killer or an operator: the request cannot have caused it."""
    answer, before = _send_while_stopped(lab, "SIGKILL")
    assert not isinstance(answer, Exception), answer
    assert answer.choices[0].message.content
    assert lab.worker(DEFAULT_MODEL)["pid"] != before["pid"]


def test_a_request_the_crashed_worker_never_took_is_not_sent_again(lab):
    """A crash (an abort, a segfault) may be the request's own doing: it is a 502, never
    repeated. (SIGABRT: a library's segfault handler may survive a SIGSEGV sent by kill.)"""
    error, _ = _send_while_stopped(lab, "SIGABRT")
    assert isinstance(error, openai.APIStatusError) and error.status_code == 502, error
    assert error.response.json()["error"]["message"] == MID_REQUEST
    lab.ready(DEFAULT_MODEL)


def test_a_model_whose_worker_cannot_load_is_a_502_and_others_keep_serving(lab):
    with pytest.raises(openai.APIStatusError) as raised:
        lab.openai.completions.create(model=BROKEN, prompt="Hi", max_tokens=2)
    assert raised.value.status_code == 502
    error = raised.value.response.json()["error"]
    assert error["type"] == "engine_unavailable" and error["state"] == "stopped"
    # An exit code, or SIGABRT when MLX's loader throws on a thread of its own.
    assert error["message"].startswith(
        f"inference engine unavailable: the worker for {BROKEN} could not load it ("
    )
    assert lab.worker(BROKEN) is None
    reply = lab.openai.completions.create(model=DEFAULT_MODEL, prompt="Hi", max_tokens=2)
    assert reply.choices[0].text


def test_a_client_template_is_refused_while_health_answers_at_once(lab):
    loops = "{% for i in range(6000) %}{% for j in range(6000) %}{% endfor %}{% endfor %}"
    with HealthWatch(lab.url) as health:
        response = lab.http.post(
            "/v1/messages/count_tokens",
            json={
                "model": DEFAULT_MODEL,
                "messages": [{"role": "user", "content": "Hi"}],
                "chat_template_kwargs": {"chat_template": loops},
            },
        )
        time.sleep(0.5)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "chat_template" in response.json()["error"]["message"]
    assert not health.slow and set(health.answers) == {200}


def test_three_models_with_room_for_two_all_complete(lab):
    async def main():
        async with openai.AsyncOpenAI(
            base_url=f"{lab.url}/v1", api_key="k", max_retries=0, timeout=300
        ) as client:
            replies = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model=name, messages=LONG, max_tokens=8, temperature=0
                    )
                    for name in (DEFAULT_MODEL, SECOND, THIRD)
                )
            )
        return [reply.choices[0].finish_reason for reply in replies]

    assert asyncio.run(main()) == ["length"] * 3
    report = lab.engine()
    resident = [w["model"] for w in report["workers"]]
    assert len(resident) <= 2 and DEFAULT_MODEL in resident  # the default model is pinned


def test_64_concurrent_streams_all_complete(lab):
    lab.ready(DEFAULT_MODEL)

    async def one(client, index: int) -> tuple[str, str]:
        stream = await client.chat.completions.create(
            model=DEFAULT_MODEL,
            messages=[{"role": "user", "content": f"Count to {index}."}],
            max_tokens=6,
            temperature=0,
            stream=True,
        )
        text, finish = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, finish

    async def main():
        async with openai.AsyncOpenAI(
            base_url=f"{lab.url}/v1", api_key="k", max_retries=0, timeout=600
        ) as client:
            return await asyncio.gather(*(one(client, i) for i in range(64)))

    results = asyncio.run(main())
    assert len(results) == 64
    assert all(text and finish in ("stop", "length") for text, finish in results)
    assert lab.http.get("/health").json()["in_flight"] == 0
