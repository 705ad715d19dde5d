"""The operator's routes on the session's live server: draining a model
(POST /api/models/<name>/drain) and the workers' lifecycle events (GET /api/events, SSE),
watched through a real stream while a real worker is loaded, drained and loaded again."""

from __future__ import annotations

import time

from tests.conftest import THINKING_MODEL

from .worker_events import EventReader


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
