"""One model across hosts: an mx.distributed ring of model-worker ranks, each in a network
namespace of its own, serving the web tier as one worker named in MLXLAB_WORKERS.

Two ranks on the default model: mlx-lm's Llama `shard()` splits the attention heads
evenly across the ranks, and the default model's 9 query and 3 key-value heads do not
split in two, so each rank serves a copy padded with zero heads (head_padding.py). The
greedy answer must still be the single-host worker's.

Each rank runs as systemd's Restart=always would run it (`Ranks`): a rank that exits is
started again a second later. A rank that dies takes the group down with it (every other
rank exits), the web tier answers as for a dead worker, and the restarted ranks form the
ring again by themselves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from inference.engine.process.lifeline import RANK_LOST
from tests.api.test_model_workers import Lab, _stream_and_kill
from tests.api.test_remote_workers import STREAM_MESSAGE
from tests.conftest import DEFAULT_MODEL, ROOT, server_home, start_daphne
from tests.hosts import Network, hosts_or_skip, unfence

SECRET = "distributed-worker-test-secret-0123"
RANKS = 2
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
RESTART_SECONDS = 1.0  # systemd's RestartSec


class Ranks:
    """The ring's ranks, one per host, each started again when it exits (Restart=always)."""

    def __init__(self, network: Network, home: Path, model_folder: Path) -> None:
        self.network, self.home = network, home
        hostfile = home / "hosts.json"
        hostfile.write_text(json.dumps([[f"{h.address}:5611"] for h in network.hosts]))
        self.address = f"tcp://{network.hosts[0].address}:7501"
        self.argv = [sys.executable, "manage.py", "modelworker", "--distributed", "--model",
                     DEFAULT_MODEL, "--path", str(model_folder), "--listen", self.address]  # fmt: skip
        self.env = {**os.environ, "MLX_HOSTFILE": str(hostfile), "MLXLAB_WORKER_SECRET": SECRET}
        self.current: list[subprocess.Popen] = [self._start(r) for r in range(RANKS)]
        self.stopping = threading.Event()
        self.keepers = [threading.Thread(target=self._keep, args=(r,), daemon=True)
                        for r in range(RANKS)]  # fmt: skip
        for keeper in self.keepers:
            keeper.start()

    def _start(self, rank: int) -> subprocess.Popen:
        return self.network.hosts[rank].popen(
            self.argv, log=self.home / f"rank{rank}.log", env={**self.env, "MLX_RANK": str(rank)},
            cwd=ROOT,
        )  # fmt: skip

    def _keep(self, rank: int) -> None:
        while not self.stopping.is_set():
            if self.current[rank].poll() is None:
                self.stopping.wait(0.2)
            elif not self.stopping.wait(RESTART_SECONDS):
                self.current[rank] = self._start(rank)

    def wait_serving(self, timeout: float = 240) -> None:
        """Until rank 0 of the current processes serves (the ring formed, the model loaded)."""
        deadline = time.monotonic() + timeout
        while True:
            mark = f"(pid {self.current[0].pid}, rank 0 of {RANKS})"
            if mark in (self.home / "rank0.log").read_text(errors="replace"):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(
                    (self.home / f"rank{r}.log").read_text()[-1500:] for r in range(RANKS)
                )
                pytest.fail(f"the ring did not start:\n{logs}")
            time.sleep(0.3)

    def stop(self) -> None:
        self.stopping.set()
        for keeper in self.keepers:
            keeper.join(5)
        self.network.down()  # kills every process started on its hosts


@pytest.fixture(scope="module")
def ring_lab(tmp_path_factory, model_folder, redis_url):
    hosts_or_skip()
    home = tmp_path_factory.mktemp("distributed")
    network = Network("ring", RANKS)
    ranks, server = None, None
    try:
        ranks = Ranks(network, home, model_folder)
        ranks.wait_serving()
        env = server_home(
            home, model_folder, WORKERS=f"{DEFAULT_MODEL}={ranks.address}", WORKER_SECRET=SECRET
        )
        server = start_daphne(home, env, "ring-daphne")
        yield server, ranks
    finally:
        if server is not None:
            server.stop()
        if ranks is not None:
            ranks.stop()
        network.down()
        unfence()


def _greedy(url: str) -> str:
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": DEFAULT_MODEL, "messages": QUESTION, "max_tokens": 16, "temperature": 0},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]["content"]


def test_the_ring_answers_the_greedy_prompt_with_the_single_host_text(ring_lab, lab_server):
    server, ranks = ring_lab
    text = _greedy(server.url)
    assert "Paris" in text
    assert text == _greedy(lab_server.url)  # the session's single-host worker
    staff = server.staff_cookies  # /stats and /engine are for staff
    stats = httpx.get(f"{server.url}/stats", cookies=staff, timeout=30).json()
    assert stats["models"][DEFAULT_MODEL]["distributed"] == {"backend": "ring", "ranks": RANKS}
    (worker,) = httpx.get(f"{server.url}/engine", cookies=staff, timeout=30).json()["workers"]
    assert worker["remote"] is True and worker["pid"] == ranks.current[0].pid


def test_the_ring_streams_and_serves_requests_sent_together(ring_lab):
    import asyncio

    import openai

    server, _ = ring_lab

    async def one(client, index: int) -> str:
        stream = await client.chat.completions.create(
            model=DEFAULT_MODEL, messages=[{"role": "user", "content": f"Count to {index}."}],
            max_tokens=6, temperature=0, stream=True,
        )  # fmt: skip
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="k", max_retries=0, timeout=300
        ) as client:
            return await asyncio.gather(*(one(client, i) for i in range(3)))

    assert all(asyncio.run(main()))  # queued at rank 0, served one after the other


def _all_exit(processes: list[subprocess.Popen], timeout: float = 120) -> list[int]:
    """Every process's exit status; a rank still running after `timeout` is a hang."""
    for rank, process in enumerate(processes):
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"rank {rank} (pid {process.pid}) is still running: it hangs")
    return [p.returncode for p in processes]


@pytest.mark.parametrize("moment", ["mid-generation", "between requests"])
def test_a_lost_rank_takes_the_group_down_and_the_restarted_group_serves(
    ring_lab, lab_server, moment
):
    server, ranks = ring_lab
    lab = Lab(server)
    before = lab.ready(DEFAULT_MODEL)
    first = list(ranks.current)
    victim = RANKS - 1  # not rank 0: its death is a plain dead worker's
    kill = lambda: os.kill(first[victim].pid, signal.SIGKILL)  # noqa: E731
    if moment == "mid-generation":
        seen, ending = _stream_and_kill(lab, "chat", kill)
        expected = STREAM_MESSAGE.format(ranks.address)  # a dead worker's frame, as any
        assert seen >= 4
        assert isinstance(ending, openai.APIError) and ending.message == expected
        assert ending.body == {"message": expected, "type": "engine_unavailable"}
    else:
        kill()  # rank 0 is idle: its proof of the ring notices
    statuses = _all_exit(first)
    assert statuses[victim] == -signal.SIGKILL
    assert [s for r, s in enumerate(statuses) if r != victim] == [RANK_LOST] * (RANKS - 1)
    deadline = time.monotonic() + 30
    while (report := lab.engine())["restarts"] == before["restarts"]:
        assert time.monotonic() < deadline, report
        time.sleep(0.2)
    assert report["last_exit"] == {"code": None, "signal": None, "link": ranks.address}

    # Each rank was started again on its own host; they form the ring again by themselves.
    ranks.wait_serving()
    after = lab.ready(DEFAULT_MODEL, timeout=120)
    assert after["pid"] == ranks.current[0].pid != before["pid"]
    assert _greedy(server.url) == _greedy(lab_server.url)
