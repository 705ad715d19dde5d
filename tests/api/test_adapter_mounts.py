"""An operator's adapter mounts on the session's live server: POST
/api/models/<name>/adapters and DELETE /api/models/<name>/adapters/<adapter> on the
default model's running worker (real adapter weights, the same worker process throughout),
their events on GET /api/events, and their refusals in the lab API's shape."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from inference.protocol.adapters import AdapterRef
from tests.adapter_files import register_adapter, write_adapter
from tests.conftest import DEFAULT_MODEL, THINKING_MODEL, user_session

from .conftest import CSRF
from .worker_events import EventReader

ALPHA = "mount-alpha"
COUNT = "Count from one to forty in words, separated by commas."


@pytest.fixture(scope="module")
def adapters(lab_server, tmp_path_factory) -> AdapterRef:
    """A random LoRA of the default model, registered; one of another model, one of the
    thinking model (the same weights' shapes) and a broken one, for the refusals."""
    root = tmp_path_factory.mktemp("mounts")
    alpha = register_adapter(lab_server, write_adapter(root / ALPHA, seed=11), DEFAULT_MODEL)
    foreign = write_adapter(root / "mount-foreign", seed=12)
    register_adapter(lab_server, foreign, "some-other-model")
    register_adapter(lab_server, write_adapter(root / "mount-think", seed=13), THINKING_MODEL)
    broken = root / "mount-broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{}")
    register_adapter(lab_server, AdapterRef("mount-broken", str(broken)), DEFAULT_MODEL)
    yield alpha


@pytest.fixture
def member(lab_server) -> httpx.Client:
    """A logged-in user's session (not staff), its CSRF token set."""
    session = user_session(lab_server.env, "adapter-member", staff=False)
    cookies = {**session, "csrftoken": CSRF}
    with httpx.Client(
        base_url=lab_server.url, cookies=cookies, headers={"X-CSRFToken": CSRF}, timeout=60
    ) as client:
        yield client


def ask(client, adapter: str | None = None, text: str = "Say hello.", tokens: int = 8) -> str:
    reply = client.chat.completions.create(
        model=DEFAULT_MODEL, messages=[{"role": "user", "content": text}], max_tokens=tokens,
        temperature=0, extra_body={"adapter": adapter} if adapter else None,
    )  # fmt: skip
    return reply.choices[0].message.content


def worker(staff) -> dict:
    return next(w for w in staff.get("/engine").json()["workers"] if w["model"] == DEFAULT_MODEL)


def mounts(model: str = DEFAULT_MODEL, adapter: str = "") -> str:
    return f"/api/models/{model}/adapters" + (f"/{adapter}" if adapter else "")


def test_a_mounted_adapter_answers_as_the_per_request_one_with_no_restart(
    lab_server, staff, client, adapters
):
    reader = EventReader(lab_server, after=10**9)  # live events only
    try:
        pid = worker(staff)["pid"]
        base = ask(client)
        per_request = ask(client, ALPHA)  # the request loads it, as any registered adapter
        assert per_request != base
        freed = staff.delete(mounts(adapter=ALPHA))  # a loaded adapter is dropped too
        assert freed.status_code == 200, freed.text
        assert freed.json() == {"model": DEFAULT_MODEL, "adapter": ALPHA, "mounted": [],
                                "deferred": False}  # fmt: skip
        mounted = staff.post(mounts(), json={"adapter": ALPHA})
        assert mounted.status_code == 200, mounted.text
        assert mounted.json() == {"model": DEFAULT_MODEL, "adapter": ALPHA, "mounted": [ALPHA]}
        event = reader.wait_for("adapter_mount", DEFAULT_MODEL)
        assert event[2]["detail"] == {"adapter": ALPHA}
        assert worker(staff)["adapters"] == [ALPHA]
        assert staff.get(f"/api/models/{DEFAULT_MODEL}").json()["adapters"] == [ALPHA]
        assert ask(client, ALPHA) == per_request  # exactly as the per-request adapter
        assert ask(client) == base  # and only where a request names it
        assert worker(staff)["pid"] == pid  # the same worker process throughout
        assert staff.post(mounts(), json={"adapter": ALPHA}).json()["mounted"] == [ALPHA]
    finally:
        reader.close()
        staff.delete(mounts(adapter=ALPHA))


def test_an_unmount_lets_the_stream_using_it_finish_under_it(lab_server, staff, client, adapters):
    assert staff.post(mounts(), json={"adapter": ALPHA}).status_code == 200
    expected = ask(client, ALPHA, COUNT, tokens=160)
    reader = EventReader(lab_server, after=10**9)
    try:
        stream = client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": COUNT}], max_tokens=160,
            temperature=0, stream=True, extra_body={"adapter": ALPHA},
        )  # fmt: skip
        chunks = iter(stream)
        text = "".join(c.choices[0].delta.content or "" for c in [next(chunks)] if c.choices)
        answer = staff.delete(mounts(adapter=ALPHA))  # vLLM's users expect no refusal
        assert answer.status_code == 200, answer.text
        assert answer.json()["mounted"] == [] and answer.json()["deferred"] is True
        text += "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == expected  # it ran to its end under the adapter
        event = reader.wait_for("adapter_unmount", DEFAULT_MODEL)
        assert event[2]["detail"] == {"adapter": ALPHA, "deferred": True}
    finally:
        reader.close()
    gone = staff.delete(mounts(adapter=ALPHA))  # dropped once the stream was done
    assert gone.status_code == 404, gone.text
    assert gone.json() == {"detail": f"The adapter '{ALPHA}' is not mounted on {DEFAULT_MODEL}"}


def test_a_restarted_worker_mounts_its_adapters_again(lab_server, staff, client, adapters):
    assert staff.post(mounts(), json={"adapter": ALPHA}).status_code == 200
    mounted = ask(client, ALPHA)
    reader = EventReader(lab_server, after=10**9)
    try:
        before = worker(staff)["pid"]
        os.kill(before, signal.SIGKILL)
        exited = reader.wait_for("exit", DEFAULT_MODEL)
        remounted = reader.wait_for("adapter_mount", DEFAULT_MODEL, after=exited[0])
        ready = reader.wait_for("ready", DEFAULT_MODEL, after=exited[0])
        assert remounted[0] < ready[0]  # before it took a request
        now = worker(staff)
        assert now["pid"] != before and now["adapters"] == [ALPHA]
        assert ask(client, ALPHA) == mounted
    finally:
        reader.close()
        staff.delete(mounts(adapter=ALPHA))


def test_mounts_are_refused_in_the_lab_apis_shape(lab_server, staff, http, member, adapters):
    for method, path in [("POST", mounts()), ("DELETE", mounts(adapter=ALPHA))]:
        body = {"adapter": ALPHA} if method == "POST" else None
        assert http.request(method, path, json=body).status_code in (401, 403)
        refused = member.request(method, path, json=body)
        assert refused.status_code == 403, refused.text
        assert refused.json() == {"detail": "Only staff users may do this."}
    cases = [
        ("POST", mounts("no-such-model"), {"adapter": ALPHA}, 404, "No model named"),
        ("POST", mounts(), {"adapter": "no-such-adapter"}, 404, "No adapter named"),
        ("DELETE", mounts(adapter="no-such-adapter"), None, 404, "No adapter named"),
        ("DELETE", mounts("no-such-model", ALPHA), None, 404, "No model named"),
        ("POST", mounts(), {}, 400, "expected {"),
        ("POST", mounts(), {"adapter": "mount-foreign"}, 400, "was trained on some-other-model"),
        ("POST", mounts(), {"adapter": "mount-broken"}, 400, "cannot read the adapter"),
    ]
    for method, path, body, status, detail in cases:
        answer = staff.request(method, path, json=body)
        assert answer.status_code == status, (path, answer.text)
        assert list(answer.json()) == ["detail"] and detail in answer.json()["detail"]
    assert worker(staff)["adapters"] == []  # the broken one left nothing mounted
    if any(w["model"] == THINKING_MODEL for w in staff.get("/engine").json()["workers"]):
        assert staff.post(f"/api/models/{THINKING_MODEL}/unload").status_code == 200
    idle = staff.post(mounts(THINKING_MODEL), json={"adapter": "mount-think"})
    assert idle.status_code == 409
    assert idle.json() == {"detail": f"{THINKING_MODEL} has no running worker: load it first"}
