"""The operator's routes on the session's live server: draining a model
(POST /api/models/<name>/drain) and the workers' lifecycle events (GET /api/events, SSE),
watched through a real stream while a real worker is loaded, drained and loaded again."""

from __future__ import annotations

import json
import secrets
import threading
import time

import httpx
import pytest

from tests.conftest import THINKING_MODEL

CSRF = secrets.token_hex(16)  # 32 characters: Django takes an unmasked secret as the token


class EventReader:
    """GET /api/events read on a thread: (id, kind, data) as they arrive."""

    def __init__(self, server, after: int | None = None, headers: dict | None = None) -> None:
        self.events: list[tuple[int, str, dict]] = []
        self.comments: list[str] = []
        self.status: int | None = None
        self._client = server.staff_client(timeout=httpx.Timeout(10, read=60))
        headers = {"Accept": "text/event-stream", **(headers or {})}  # as EventSource sends
        query = "" if after is None else f"?after={after}"
        self._thread = threading.Thread(target=self._read, args=(query, headers), daemon=True)
        self._thread.start()

    def _read(self, query: str, headers: dict) -> None:
        try:
            with self._client.stream("GET", f"/api/events{query}", headers=headers) as response:
                self.status = response.status_code
                fields: dict[str, str] = {}
                for line in response.iter_lines():
                    if line.startswith(":"):
                        self.comments.append(line)
                    elif line:
                        key, _, value = line.partition(": ")
                        fields[key] = value
                    elif "data" in fields:
                        self.events.append(
                            (int(fields["id"]), fields["event"], json.loads(fields["data"]))
                        )
                        fields = {}
        except (httpx.HTTPError, RuntimeError):  # closed by close()
            pass

    def wait_for(self, kind: str, model: str, after: int = 0, timeout: float = 90) -> tuple:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event[0] > after and event[1] == kind and event[2]["model"] == model:
                    return event
            time.sleep(0.05)
        raise AssertionError(f"no {kind} event for {model}: {self.events}")

    def close(self) -> None:
        self._client.close()


@pytest.fixture
def staff(lab_server):
    with lab_server.staff_client(timeout=120) as client:
        client.cookies.set("csrftoken", CSRF)
        client.headers["X-CSRFToken"] = CSRF
        yield client


def worker_states(staff, model: str) -> list[str]:
    return [w["state"] for w in staff.get("/engine").json()["workers"] if w["model"] == model]


def test_a_drained_model_finishes_its_stream_then_stops_and_loads_again(lab_server, staff, client):
    reader = EventReader(lab_server, after=10**9)  # live events only
    try:
        while reader.status is None:
            time.sleep(0.05)
        assert reader.status == 200 and reader.comments[0] == ": worker events"
        if THINKING_MODEL in [w["model"] for w in staff.get("/engine").json()["workers"]]:
            assert staff.post(f"/api/models/{THINKING_MODEL}/unload").status_code == 200
        assert staff.post(f"/api/models/{THINKING_MODEL}/load").status_code == 200
        load = reader.wait_for("load", THINKING_MODEL)
        starting = reader.wait_for("starting", THINKING_MODEL)
        ready = reader.wait_for("ready", THINKING_MODEL)
        assert load[0] < starting[0] < ready[0] and starting[2]["detail"]["pid"] > 0

        stream = client.chat.completions.create(
            model=THINKING_MODEL, max_tokens=96, stream=True,
            messages=[{"role": "user", "content": "Count from one to twenty in words."}],
        )  # fmt: skip
        chunks = iter(stream)
        first = next(chunks)  # the stream is running on the worker
        answer = staff.post(f"/api/models/{THINKING_MODEL}/drain")
        assert answer.status_code == 202 and answer.json() == {
            "name": THINKING_MODEL,
            "draining": True,
        }
        assert worker_states(staff, THINKING_MODEL) == ["draining"]
        reader.wait_for("draining", THINKING_MODEL, after=ready[0])
        rest = list(chunks)  # it runs to its end: no error frame, a finish reason
        assert first.choices and [c.choices[0].finish_reason for c in rest if c.choices][-1] in (
            "stop",
            "length",
        )

        exited = reader.wait_for("exit", THINKING_MODEL, after=ready[0])
        assert exited[2]["detail"]["expected"] is True
        assert worker_states(staff, THINKING_MODEL) == []
        # The next request loads it again.
        again = client.completions.create(model=THINKING_MODEL, prompt="Hi", max_tokens=2)
        assert again.choices[0].text
        reloaded = reader.wait_for("ready", THINKING_MODEL, after=exited[0])
        kinds = [kind for i, kind, data in reader.events if data["model"] == THINKING_MODEL]
        assert kinds[kinds.index("draining") :][:2] == ["draining", "exit"]
    finally:
        reader.close()

    # A reader that reconnects with Last-Event-ID gets what came after it, kept in order.
    replay = EventReader(lab_server, headers={"Last-Event-ID": str(load[0] - 1)})
    try:
        replay.wait_for("ready", THINKING_MODEL, after=exited[0])
        ids = [event[0] for event in replay.events]
        assert ids == sorted(ids) and ids[0] == load[0] and reloaded[0] in ids
    finally:
        replay.close()


def test_the_operator_routes_are_for_staff(lab_server, staff, http):
    assert http.get("/api/events").status_code in (401, 403)
    assert http.post(f"/api/models/{THINKING_MODEL}/drain").status_code in (401, 403)
    assert staff.post("/api/models/no-such-model/drain").status_code == 404
    if THINKING_MODEL not in [w["model"] for w in staff.get("/engine").json()["workers"]]:
        refused = staff.post(f"/api/models/{THINKING_MODEL}/drain")
        assert refused.status_code == 409 and "no local worker" in refused.json()["detail"]
