"""A model worker on another host (a network namespace) serving the web tier over TCP.

The worker is started there as an operator would (`manage.py modelworker --listen
tcp://HOST:PORT`, MLXLAB_WORKER_SECRET set), the web tier names it in MLXLAB_WORKERS
and spawns no worker of its own. Its death, or its host dropping off the network, ends
the requests it held with the model-worker failure contract's frames
(test_model_workers.py), never a hang; a peer without the secret is refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import zmq

from inference.protocol import link, wire
from tests.api.test_model_workers import LONG, Lab, _stream_and_kill
from tests.conftest import DEFAULT_MODEL, ROOT, server_home, start_daphne
from tests.hosts import hosts_or_skip, new_host, unfence

SECRET = "remote-worker-test-secret-0123456789"
PORT = 7301
LINK_TIMEOUT = 2.0
STREAM_MESSAGE = (
    "inference engine unavailable: the engine worker stopped while streaming this response "
    "(lost the link to {}); it is being reconnected"
)


class RemoteWorker:
    """`manage.py modelworker` on another host, restartable as systemd would."""

    def __init__(self, host, folder: Path, home: Path) -> None:
        self.host, self.folder, self.home = host, folder, home
        self.address = f"tcp://{host.address}:{PORT}"
        self.process: subprocess.Popen | None = None

    def env(self, **extra: str) -> dict:
        return {**os.environ, "MLXLAB_WORKER_SECRET": SECRET,
                "MLXLAB_WORKER_LINK_TIMEOUT_SECONDS": str(LINK_TIMEOUT), **extra}  # fmt: skip

    def argv(self, address: str | None = None) -> list[str]:
        return [sys.executable, "manage.py", "modelworker", "--model", DEFAULT_MODEL,
                "--path", str(self.folder), "--listen", address or self.address]  # fmt: skip

    def start(self) -> None:
        self.process = self.host.popen(
            self.argv(), log=self.home / "worker.log", env=self.env(), cwd=ROOT
        )
        log = self.home / "worker.log"
        deadline = time.monotonic() + 120
        mark = f"serving at {self.address} (pid {self.process.pid})"
        while mark not in log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the remote worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture(scope="module")
def remote(tmp_path_factory, model_folder, redis_url):
    hosts_or_skip()
    home = tmp_path_factory.mktemp("remote-workers")
    host = new_host("gpu")
    worker = RemoteWorker(host, model_folder, home)
    server = None
    try:
        worker.start()
        env = server_home(
            home, model_folder,
            WORKERS=f"{DEFAULT_MODEL}={worker.address}", WORKER_SECRET=SECRET,
            WORKER_LINK_TIMEOUT_SECONDS=str(LINK_TIMEOUT), ENGINE_WAIT_SECONDS="20",
        )  # fmt: skip
        server = start_daphne(home, env, "remote-daphne")
        yield Lab(server), worker
    finally:
        if server is not None:
            server.stop()  # first: nothing reconnects to a host that is gone
        host.down()
        unfence()


def _children(pid: int) -> list[str]:
    """The command lines of `pid`'s child processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return found


def _stream_text(lab: Lab) -> tuple[str, str | None]:
    text, finish = "", None
    stream = lab.openai.chat.completions.create(
        model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=24, temperature=0, stream=True,
    )  # fmt: skip
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def test_a_worker_on_another_host_streams_through_the_web_tier(remote):
    lab, worker = remote
    text, finish = _stream_text(lab)
    assert text and finish in ("stop", "length")
    report = lab.worker(DEFAULT_MODEL)
    assert report["remote"] is True and report["socket"] == worker.address
    assert report["pid"] == worker.process.pid  # the worker's own report, from its host
    # The web tier spawned no worker of its own.
    assert not [c for c in _children(lab.server.process.pid) if "modelworker" in c]


@pytest.mark.parametrize("surface", ["chat", "messages"])
def test_the_remote_workers_death_ends_the_stream_with_the_contracts_frame(remote, surface):
    lab, worker = remote
    before = lab.ready(DEFAULT_MODEL)
    seen, ending = _stream_and_kill(lab, surface, worker.kill)
    expected = STREAM_MESSAGE.format(worker.address)
    assert seen >= 4
    if surface == "chat":
        assert isinstance(ending, openai.APIError) and ending.message == expected
        assert ending.body == {"message": expected, "type": "engine_unavailable"}
    else:
        assert isinstance(ending, anthropic.APIStatusError)
        assert ending.body == {"type": "error", "error": {"type": "api_error", "message": expected}}
    report = lab.engine()
    assert report["last_exit"] == {"code": None, "signal": None, "link": worker.address}
    assert report["restarts"] == before["restarts"] + 1 and report["state"] == "restarting"

    # Its host starts it again (systemd's Restart=): the web tier reconnects by itself.
    worker.start()
    after = lab.ready(DEFAULT_MODEL, timeout=60)
    assert after["pid"] == worker.process.pid != before["pid"]
    assert _stream_text(lab)[0]


def test_a_request_while_the_worker_is_gone_is_a_502_not_a_hang(remote):
    lab, worker = remote
    lab.ready(DEFAULT_MODEL)
    worker.kill()
    deadline = time.monotonic() + 10
    while lab.engine()["state"] != "restarting":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as raised:
        lab.openai.chat.completions.create(model=DEFAULT_MODEL, messages=LONG, max_tokens=4)
    assert time.monotonic() - started < 30  # ENGINE_WAIT_SECONDS, then the 502
    assert raised.value.status_code == 502
    assert raised.value.response.json()["error"] == {
        "message": (
            f"inference engine unavailable: the link to the worker for {DEFAULT_MODEL} at "
            f"{worker.address} is lost; waiting for it to answer again — retry shortly"
        ),
        "type": "engine_unavailable",
        "state": "restarting",
    }
    worker.start()
    lab.ready(DEFAULT_MODEL, timeout=60)


def test_a_host_that_drops_off_the_network_ends_its_streams_within_the_link_timeout(remote):
    """No FIN, no RST: only the heartbeats tell. The stream ends; it does not hang."""
    lab, worker = remote
    before = lab.ready(DEFAULT_MODEL)
    cut_at: list[float] = []

    def cut() -> None:
        worker.host.cut()
        cut_at.append(time.monotonic())

    try:
        seen, ending = _stream_and_kill(lab, "chat", cut)
        waited = time.monotonic() - cut_at[0]
    finally:
        worker.host.mend()
    assert isinstance(ending, openai.APIError), ending
    assert ending.message == STREAM_MESSAGE.format(worker.address)
    assert waited < LINK_TIMEOUT + 5
    # Back on the network, the same worker process serves again.
    after = lab.ready(DEFAULT_MODEL, timeout=60)
    assert after["pid"] == before["pid"] and after["restarts"] == before["restarts"] + 1
    assert _stream_text(lab)[0]


def _ask_report(address: str, secret: str | None) -> object:
    """A "report" frame to the worker from a peer holding `secret` (None: no CURVE)."""
    context = zmq.Context()
    try:
        socket = context.socket(zmq.DEALER)
        socket.linger = 0
        if secret is not None:
            link.secure_client(socket, secret)
        socket.connect(address)
        socket.send(wire.encode("report", 1))
        if not socket.poll(3000):
            return None
        return wire.decode(socket.recv())[2]
    finally:
        context.destroy(0)


def test_only_a_peer_holding_the_secret_is_answered(remote):
    lab, worker = remote
    lab.ready(DEFAULT_MODEL)
    # Sent from this host to the worker's, as any peer on the network could.
    assert _ask_report(worker.address, SECRET).model == DEFAULT_MODEL
    assert _ask_report(worker.address, None) is None
    assert _ask_report(worker.address, "another-secret-of-32-characters!") is None


def test_a_generation_whose_web_process_is_gone_is_cancelled_by_the_worker(remote):
    """A web replica that dies does not leave its generations running to their end."""
    lab, worker = remote
    lab.ready(DEFAULT_MODEL)
    cancelled = _ask_report(worker.address, SECRET).stats["requests_cancelled"]
    context = zmq.Context()
    try:
        socket = context.socket(zmq.DEALER)
        socket.linger = 0
        link.secure_client(socket, SECRET)
        socket.connect(worker.address)
        call = wire.GenerateCall(text="Once upon a time", max_tokens=4000, default_max_tokens=4000)
        socket.send(wire.encode("generate", 1, call))
        kinds = []
        while len(kinds) < 3:  # accepted, then tokens: it is generating
            assert socket.poll(30_000)
            kinds.append(wire.decode(socket.recv())[0])
        assert kinds[0] == "accepted" and "text" in kinds
    finally:
        context.destroy(0)  # the web process is gone, without a word
    deadline = time.monotonic() + 30
    while _ask_report(worker.address, SECRET).in_flight:
        assert time.monotonic() < deadline, "the worker went on generating for nobody"
        time.sleep(0.2)
    assert _ask_report(worker.address, SECRET).stats["requests_cancelled"] == cancelled + 1


def test_the_rows_of_a_step_reach_the_web_tier_as_one_message(remote):
    """What the engine emitted meanwhile goes to a web process as one message: it wakes
    once per step, not once per token of every row; each request's events keep their order."""
    lab, worker = remote
    lab.ready(DEFAULT_MODEL)
    context = zmq.Context()
    kinds: dict[int, list[str]] = {1: [], 2: [], 3: []}
    together = 0
    try:
        socket = context.socket(zmq.DEALER)
        socket.linger = 0
        link.secure_client(socket, SECRET)
        socket.connect(worker.address)
        for request_id in kinds:
            text = f"Story {request_id}: once upon a time"
            call = wire.GenerateCall(text=text, max_tokens=12, default_max_tokens=12)
            socket.send(wire.encode("generate", request_id, call))
        while any(not seen or seen[-1] != "finished" for seen in kinds.values()):
            assert socket.poll(60_000)
            message = [wire.decode(frame) for frame in socket.recv_multipart()]
            together += len({request_id for _, request_id, _ in message}) > 1
            for kind, request_id, _ in message:
                kinds[request_id].append(kind)
    finally:
        context.destroy(0)
    assert together > 0
    for seen in kinds.values():
        assert seen[0] == "accepted" and seen[-1] == "finished" and "text" in seen


def test_a_web_tier_with_another_secret_is_refused_at_once(remote, tmp_path, model_folder):
    lab, worker = remote
    lab.ready(DEFAULT_MODEL)
    env = server_home(
        tmp_path, model_folder,
        WORKERS=f"{DEFAULT_MODEL}={worker.address}", WORKER_SECRET="not-the-workers-secret-at-all",
    )  # fmt: skip
    other = start_daphne(tmp_path, env, "wrong-secret-daphne", wait_for_model=False)
    try:
        started = time.monotonic()
        answer = httpx.post(
            f"{other.url}/v1/chat/completions",
            json={"model": DEFAULT_MODEL, "messages": LONG, "max_tokens": 4},
            timeout=60,
        )
        assert time.monotonic() - started < 10
    finally:
        other.stop()
    assert answer.status_code == 502
    assert answer.json()["error"]["message"] == (
        f"inference engine unavailable: the worker for {DEFAULT_MODEL} at {worker.address} "
        "refused this lab's link: its MLXLAB_WORKER_SECRET is not this lab's"
    )
    assert _stream_text(lab)[0]  # the lab that holds the secret is served throughout


def test_a_worker_refuses_to_listen_beyond_loopback_without_a_secret(remote):
    _, worker = remote
    env = {key: value for key, value in worker.env().items() if key != "MLXLAB_WORKER_SECRET"}
    done = worker.host.run(
        worker.argv(f"tcp://{worker.host.address}:{PORT + 1}"),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "refusing to listen on tcp://" in done.stderr
    assert "without MLXLAB_WORKER_SECRET" in done.stderr
