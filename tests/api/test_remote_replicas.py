"""A model with a local replica and one on another host (a network namespace), mixed:
MLXLAB_MODEL_REPLICAS and MLXLAB_WORKERS name the same model. A remote replica whose
host drops off the network is taken out of rotation (the local one serves every new
request) and put back once it answers again; a request it had not accepted when its link
was lost goes to the local one; a drained remote replica comes back when the drain is
called off.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.api.conftest import CSRF
from tests.api.test_model_workers import Lab
from tests.api.test_remote_workers import LINK_TIMEOUT, SECRET, RemoteWorker
from tests.conftest import DEFAULT_MODEL, server_home, start_daphne
from tests.hosts import hosts_or_skip, new_host, unfence


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, model_folder, redis_url):
    hosts_or_skip()
    home = tmp_path_factory.mktemp("remote-replicas")
    host = new_host("replica")
    worker = RemoteWorker(host, model_folder, home)
    server = None
    try:
        worker.start()
        env = server_home(
            home, model_folder,
            MODEL_REPLICAS=f"{DEFAULT_MODEL}=1", WORKERS=f"{DEFAULT_MODEL}={worker.address}",
            WORKER_SECRET=SECRET, WORKER_LINK_TIMEOUT_SECONDS=str(LINK_TIMEOUT),
        )  # fmt: skip
        server = start_daphne(home, env, "mixed-daphne")
        yield Lab(server), worker
    finally:
        if server is not None:
            server.stop()
        host.down()
        unfence()


def _replicas(lab: Lab) -> list[dict]:
    workers = [w for w in lab.engine()["workers"] if w["model"] == DEFAULT_MODEL]
    return sorted(workers, key=lambda w: w["replica"])


def _until(lab: Lab, check, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while not check(replicas := _replicas(lab)):
        assert time.monotonic() < deadline, replicas
        time.sleep(0.2)
    return replicas


def _routed(replica: dict) -> int:
    return sum(replica["routing"]["routed"].values())


def _ask(lab: Lab, index: int) -> str:
    reply = lab.openai.chat.completions.create(
        model=DEFAULT_MODEL, messages=[{"role": "user", "content": f"Name a bird ({index})."}],
        max_tokens=4, temperature=0,
    )  # fmt: skip
    return reply.choices[0].message.content


def test_a_lost_remote_replica_is_taken_out_and_put_back(mixed):
    lab, worker = mixed
    replicas = _until(lab, lambda rs: len(rs) == 2 and all(r["state"] == "ready" for r in rs))
    local, remote = replicas
    assert (local["remote"], remote["remote"]) == (False, True)
    assert remote["socket"] == worker.address and remote["pid"] == worker.process.pid

    worker.host.cut()  # no FIN, no RST: the heartbeats tell within the link timeout
    try:
        _until(lab, lambda rs: rs[1]["state"] == "restarting", timeout=LINK_TIMEOUT + 10)
        before = _replicas(lab)
        assert all(_ask(lab, i) for i in range(4))  # none waits for the lost one
        during = _replicas(lab)
        assert _routed(during[0]) == _routed(before[0]) + 4
        assert _routed(during[1]) == _routed(before[1])
    finally:
        worker.host.mend()
    back = _until(lab, lambda rs: rs[1]["state"] == "ready")
    assert back[1]["pid"] == worker.process.pid  # the same process, back in rotation
    with ThreadPoolExecutor(4) as pool:  # together: the least loaded takes each in turn
        assert all(pool.map(lambda i: _ask(lab, i), range(4, 8)))
    assert _routed(_replicas(lab)[1]) > _routed(back[1])  # it takes requests again


def _staff(lab: Lab):
    """A staff session that may POST and DELETE (its CSRF token set)."""
    client = lab.server.staff_client(timeout=60, headers={"X-CSRFToken": CSRF})
    client.cookies.set("csrftoken", CSRF)
    return client


def test_a_request_the_lost_remote_replica_never_took_goes_to_the_local_one(mixed):
    lab, worker = mixed
    _until(lab, lambda rs: len(rs) == 2 and all(r["state"] == "ready" for r in rs))
    # A session sticks to the replica that served it: find one the remote replica holds.
    for index in range(16):
        before = _replicas(lab)
        lab.openai.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=1,
            extra_body={"session_id": f"s{index}"},
        )  # fmt: skip
        if _routed(_replicas(lab)[1]) > _routed(before[1]):
            session = f"s{index}"
            break
    else:
        pytest.fail("no session went to the remote replica")
    worker.host.cut()
    try:
        # Sent to the remote replica, whose host no longer answers: never accepted. The
        # heartbeats find the link lost, and the request goes to the local replica.
        reply = lab.openai.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Name a river."}],
            max_tokens=4, temperature=0, extra_body={"session_id": session},
        )  # fmt: skip
        assert reply.choices[0].message.content
        lost = _replicas(lab)
        assert lost[1]["state"] == "restarting"
        assert _routed(lost[1]) == _routed(before[1]) + 2  # the session's first, and this one
        assert _routed(lost[0]) == _routed(before[0]) + 1  # the retry, on the local one
    finally:
        worker.host.mend()
    _until(lab, lambda rs: rs[1]["state"] == "ready")


def test_a_drained_remote_replica_comes_back_when_the_drain_is_called_off(mixed):
    lab, _ = mixed
    local, remote = _until(lab, lambda rs: len(rs) == 2 and all(r["state"] == "ready" for r in rs))
    with _staff(lab) as staff:
        drained = staff.post(f"/engine/replicas/{remote['id']}/drain")
        assert drained.status_code == 202 and drained.json()["state"] == "draining"
        before = _replicas(lab)
        assert all(_ask(lab, i) for i in range(3))  # none goes to the drained one
        assert _routed(_replicas(lab)[1]) == _routed(before[1])
        # Its streams ended, and its host is not restarting it: it stays out until called back.
        assert _replicas(lab)[1]["state"] == "draining"
        back = staff.delete(f"/engine/replicas/{remote['id']}/drain")
        assert back.status_code == 200 and back.json()["state"] == "ready"
        assert staff.delete("/engine/replicas/w999/drain").status_code == 404
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(lambda i: _ask(lab, i), range(3, 7)))
    after = _replicas(lab)
    assert _routed(after[1]) > _routed(before[1])  # it takes requests again
    assert after[1]["pid"] == remote["pid"]  # the same process: no restart
