"""One model on two local worker processes (MLXLAB_MODEL_REPLICAS) behind a real Daphne.

Requests spread over the replicas, a conversation keeps to the replica that cached it,
a replica killed under load takes no new request (the other serves them at once) and
its streams go on on the other from their checkpoints, and a drained replica finishes its
streams while the other takes the new ones. One server for the module: its tests kill
and drain workers, which must not disturb the session's shared server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import httpx
import openai
import pytest

from inference.engine.caching.prompt_cache import MIN_DISK_GAIN
from tests.api.test_model_workers import SECOND, THIRD, _copy
from tests.conftest import DEFAULT_MODEL, ROOT, _manage, server_home, start_daphne

LONG = "Write a long story about a dragon who learns to sail, with many chapters."


class ReplicaLab:
    def __init__(self, server, key: str) -> None:
        self.server = server
        self.key = key
        headers = {"Authorization": f"Bearer {key}"}
        self.http = httpx.Client(base_url=server.url, timeout=120, headers=headers)
        self.openai = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)

    def async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.server.url}/v1", api_key=self.key, max_retries=0, timeout=600
        )

    def replicas(self) -> list[dict]:
        workers = self.http.get("/engine").json()["workers"]
        return sorted(
            (w for w in workers if w["model"] == DEFAULT_MODEL), key=lambda w: w["replica"]
        )

    def ready(self, timeout: float = 180) -> list[dict]:
        """Both replicas, once both serve."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            replicas = self.replicas()
            if len(replicas) == 2 and all(r["state"] == "ready" for r in replicas):
                return replicas
            time.sleep(0.2)
        pytest.fail(f"the replicas did not become ready: {self.replicas()}")

    def routed(self) -> dict[str, dict[str, int]]:
        """Each replica's routed requests by reason, by replica id."""
        return {r["id"]: r["routing"]["routed"] for r in self.replicas()}


@pytest.fixture(scope="module")
def lab(tmp_path_factory, model_folder, redis_url):
    home = tmp_path_factory.mktemp("replicas")
    env = server_home(
        home, model_folder, MODEL_REPLICAS=f"{DEFAULT_MODEL}=2", ENGINE_WAIT_SECONDS="60",
        MAX_LOADED_MODELS="3",
    )  # fmt: skip
    for name in (SECOND, THIRD):
        _manage(env, "add_model", str(_copy(model_folder, home / name)), "--name", name)
    server = start_daphne(home, env, "replicas-daphne")
    try:
        # A staff user's key (the drain route is staff's); it closes the open API here.
        key = subprocess.run(
            [sys.executable, "manage.py", "create_api_key", "--user", "status-reader"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        lab = ReplicaLab(server, key)
        lab.ready()
        yield lab
    finally:
        server.stop()


def _delta(before: dict, after: dict) -> dict[str, dict[str, int]]:
    return {
        replica: {
            reason: count - before.get(replica, {}).get(reason, 0) for reason, count in c.items()
        }
        for replica, c in after.items()
    }


async def _stream(client, content: str, max_tokens: int, seen: list | None = None):
    """(text, finish reason or the error that ended it)."""
    text, ending = "", None
    try:
        stream = await client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens, temperature=0, stream=True,
        )  # fmt: skip
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                ending = chunk.choices[0].finish_reason or ending
                if seen is not None and chunk.choices[0].delta.content:
                    seen.append(content)
    except openai.APIError as error:
        ending = error
    return text, ending


def test_each_replica_is_reported(lab):
    replicas = lab.ready()
    assert [r["replica"] for r in replicas] == [0, 1]
    assert len({r["id"] for r in replicas}) == 2 and len({r["pid"] for r in replicas}) == 2
    assert len({r["socket"] for r in replicas}) == 2
    for replica in replicas:
        assert replica["queue"] == 0 and replica["in_flight"] == 0
        assert set(replica["prompt_cache"]) == {"entries", "bytes", "hits", "cached_tokens"}
        assert set(replica["routing"]) == {"routed", "prefix_chars", "sessions"}
    health = lab.http.get("/health").json()
    assert health["models_loaded"] == [DEFAULT_MODEL]
    assert [w["replica"] for w in health["workers"]] == [0, 1]
    lab.openai.completions.create(model=DEFAULT_MODEL, prompt="One, two,", max_tokens=2)
    stats = lab.http.get("/stats").json()
    entry = stats["models"][DEFAULT_MODEL]
    assert [r["replica"] for r in entry["replicas"]] == [0, 1]
    assert entry["generated_tokens"] == sum(r["generated_tokens"] for r in entry["replicas"])
    metrics = lab.http.get("/metrics").text
    for replica in ("0", "1"):
        assert (
            f'mlxlab:worker_state{{model_name="{DEFAULT_MODEL}",replica="{replica}",'
            'state="ready"} 1.0' in metrics
        )
    assert "mlxlab:replica_routed_requests_total{" in metrics


def test_two_replicas_serve_sixteen_concurrent_streams(lab):
    lab.ready()
    before = lab.routed()

    async def main():
        async with lab.async_client() as client:
            return await asyncio.gather(
                *(_stream(client, f"Count to {i}, then name a colour.", 12) for i in range(16))
            )

    results = asyncio.run(main())
    assert all(text and ending in ("stop", "length") for text, ending in results), results
    moved = _delta(before, lab.routed())
    spread = [sum(reasons.values()) for reasons in moved.values()]
    assert sum(spread) == 16 and min(spread) >= 4, moved  # both replicas took a share


def _conversation(client: openai.OpenAI, opening: str, turns: int = 10) -> list[int]:
    """A conversation with no session key; each turn's cached prompt tokens."""
    messages = [{"role": "user", "content": opening}]
    cached = []
    for turn in range(turns):
        reply = client.chat.completions.create(
            model=DEFAULT_MODEL, messages=messages, max_tokens=16, temperature=0
        )
        cached.append(reply.usage.prompt_tokens_details.cached_tokens)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        messages.append({"role": "user", "content": f"Thank you. Now tell me fact {turn + 2}."})
    return cached


def test_a_conversation_keeps_to_the_replica_that_cached_it(lab, client):
    lab.ready()
    opening = (
        f"Note {uuid.uuid4().hex}. I am planning a long trip along the coast of Norway in "
        "the summer, with stops in Bergen, Alesund, Trondheim and the Lofoten islands, and "
        "I would like short, practical facts about each place: what to see, what to eat, "
        "and how to travel between them. Give me one fact at a time."
    )
    before = lab.routed()
    replicated = _conversation(lab.openai, opening)
    moved = _delta(before, lab.routed())
    # Every turn after the first follows its cached prefix, to one replica.
    assert sorted(reasons["prefix"] for reasons in moved.values()) == [0, 9], moved
    # Each later turn's cache hit is the one replica's (`client`: the session's one-worker
    # lab). The first turn's is the chat template's opening, whatever a worker ran before.
    # Short by less than MIN_DISK_GAIN only where one worker's RAM held a few tokens more
    # than the other's and the disk tier's file was not worth reading for them; a turn
    # routed away from its cache would lose its whole conversation.
    alone = _conversation(client, opening)
    assert all(c > 0 for c in replicated[1:]), replicated
    close = [r > a - MIN_DISK_GAIN for r, a in zip(replicated[1:], alone[1:], strict=True)]
    assert all(close), (
        replicated,
        alone,
    )


async def _answer(lab: ReplicaLab, content: str, max_tokens: int) -> httpx.Response:
    """A chat answer not streamed, as the raw response (its headers say if it resumed)."""
    body = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0}  # fmt: skip
    headers = {"Authorization": f"Bearer {lab.key}"}
    async with httpx.AsyncClient(base_url=lab.server.url, timeout=300) as client:
        return await client.post("/v1/chat/completions", json=body, headers=headers)


def test_a_session_sticks_to_its_replica(lab):
    lab.ready()
    session = f"session-{uuid.uuid4().hex[:8]}"
    before = lab.routed()
    for question in ("Hi.", "What is two and two?", "And three and three?"):
        lab.openai.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": question}],
            max_tokens=4, extra_body={"session_id": session},
        )  # fmt: skip
    moved = _delta(before, lab.routed())
    assert sorted(reasons["session"] for reasons in moved.values()) == [0, 2], moved


def test_a_replica_killed_under_load_fails_no_new_request(lab):
    replicas = lab.ready()
    victim = replicas[0]
    seen: list[str] = []

    before = lab.routed()

    async def main():
        async with lab.async_client() as client:
            running = [
                asyncio.ensure_future(_stream(client, f"{LONG} ({i})", 200, seen)) for i in range(6)
            ]
            answers = [asyncio.ensure_future(_answer(lab, f"{LONG} <{i}>", 200)) for i in range(4)]
            # Every stream is under way, past a checkpoint (every 8 tokens) or two.
            while len(set(seen)) < 6 or min(seen.count(c) for c in set(seen)) < 12:
                await asyncio.sleep(0.05)
            at_kill = await asyncio.to_thread(lab.routed)
            os.kill(victim["pid"], signal.SIGKILL)
            new = await asyncio.gather(
                *(_stream(client, f"Name a fruit ({i}).", 8) for i in range(8))
            )
            return await asyncio.gather(*running), await asyncio.gather(*answers), new, at_kill

    in_flight, answers, new, at_kill = asyncio.run(main())
    assert all(text and ending in ("stop", "length") for text, ending in new), new
    # The killed replica's streams went on on the other, resumed from their checkpoints past
    # what they had sent: every stream finishes, with the text it gives uninterrupted.
    assert all(ending in ("stop", "length") for _, ending in in_flight), in_flight
    on_victim = sum(_delta(before, at_kill)[victim["id"]].values())
    assert on_victim > 0, at_kill  # some stream or answer was there when it was killed

    async def uninterrupted():
        return await asyncio.gather(*(_answer(lab, f"{LONG} ({i})", 200) for i in range(6)))

    again = [r.json()["choices"][0]["message"]["content"] for r in asyncio.run(uninterrupted())]
    assert [text for text, _ in in_flight] == again
    # Answers not streamed had shown nothing: the killed replica's went on the other,
    # resumed from their checkpoints. Which replica each answer went to is the router's
    # choice of the moment: the victim's share says how many at most.
    assert [answer.status_code for answer in answers] == [200] * 4, [a.text for a in answers]
    resumed = [int(a.headers.get("x-resumed-from", 0)) for a in answers]
    assert sum(1 for r in resumed if r) <= on_victim, (on_victim, resumed)
    after = lab.ready()
    assert after[0]["pid"] != victim["pid"] and after[0]["restarts"] == victim["restarts"] + 1


def test_draining_a_replica_loses_nothing(lab):
    replicas = lab.ready()
    drained = replicas[0]
    seen: list[str] = []

    async def main():
        async with lab.async_client() as client:
            running = [
                asyncio.ensure_future(_stream(client, f"{LONG} [{i}]", 80, seen)) for i in range(6)
            ]
            while len(set(seen)) < 6:
                await asyncio.sleep(0.05)
            answer = await asyncio.to_thread(
                lab.http.post, f"/engine/replicas/{drained['id']}/drain"
            )
            assert answer.status_code == 202, answer.text
            assert answer.json()["state"] == "draining"
            before = await asyncio.to_thread(lab.routed)
            new = await asyncio.gather(
                *(_stream(client, f"Name a city ({i}).", 8) for i in range(6))
            )
            return await asyncio.gather(*running), new, before

    in_flight, new, before = asyncio.run(main())
    moved = _delta(before, lab.routed())
    assert all(text and ending in ("stop", "length") for text, ending in in_flight + new)
    # The new requests all went to the other replica while the drained one finished its own.
    assert sum(moved[drained["id"]].values()) == 0 and sum(moved[replicas[1]["id"]].values()) == 6
    after = lab.ready()  # it restarted and rejoined; a drain is no failure
    assert after[0]["pid"] != drained["pid"] and after[0]["restarts"] == drained["restarts"]


def test_the_drain_route_is_for_staff_and_names_a_replica(lab, staff_http, http):
    missing = lab.http.post("/engine/replicas/w999/drain")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "replica_not_found"
    assert lab.http.get("/engine/replicas/w999/drain").status_code == 405
    # A staff session without its CSRF token: a page must not drain the lab in its name.
    # Where a key exists the API's access check refuses it; on an open API (the session's
    # server), the route's own check does.
    with lab.server.staff_client(timeout=30) as session:
        assert session.post("/engine/replicas/w999/drain").status_code == 401
    refused = staff_http.post("/engine/replicas/w999/drain")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
    assert http.post("/engine/replicas/w999/drain").json()["error"]["code"] == "staff_only"


def test_residency_counts_each_replica(lab):
    """Room for three workers: the pinned default model's two replicas and one more, so a
    second model evicts the first though only two models would be resident."""
    lab.ready()

    def resident() -> list[str]:
        return sorted(w["model"] for w in lab.http.get("/engine").json()["workers"])

    for model in (THIRD, SECOND):
        reply = lab.openai.completions.create(model=model, prompt="Hi", max_tokens=2)
        assert reply.choices[0].text
    assert resident() == sorted([DEFAULT_MODEL, DEFAULT_MODEL, SECOND])
