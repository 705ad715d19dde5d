"""One model across hosts: an mx.distributed ring of model-worker ranks, each in a network
namespace of its own, serving the web tier as one worker named in MLXLAB_WORKERS.

Three ranks, not two: mlx-lm's Llama `shard()` splits the attention heads across the
ranks, and the default model has 9 query heads and 3 key-value heads, which two ranks
cannot share out evenly (three can). The greedy answer must be the single-host worker's.
"""

from __future__ import annotations

import json
import os
import sys
import time

import httpx
import pytest

from tests.conftest import DEFAULT_MODEL, ROOT, server_home, start_daphne
from tests.hosts import Network, hosts_or_skip, unfence

SECRET = "distributed-worker-test-secret-0123"
RANKS = 3
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def ring_lab(tmp_path_factory, model_folder, redis_url):
    hosts_or_skip()
    home = tmp_path_factory.mktemp("distributed")
    network = Network("ring", RANKS)
    server = None
    try:
        hostfile = home / "hosts.json"
        hostfile.write_text(json.dumps([[f"{h.address}:5611"] for h in network.hosts]))
        address = f"tcp://{network.hosts[0].address}:7501"
        argv = [sys.executable, "manage.py", "modelworker", "--distributed", "--model",
                DEFAULT_MODEL, "--path", str(model_folder), "--listen", address]  # fmt: skip
        for rank, host in enumerate(network.hosts):
            env = {**os.environ, "MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile),
                   "MLXLAB_WORKER_SECRET": SECRET}  # fmt: skip
            host.popen(argv, log=home / f"rank{rank}.log", env=env, cwd=ROOT)
        log = home / "rank0.log"
        deadline = time.monotonic() + 180
        while f"rank 0 of {RANKS}" not in log.read_text(errors="replace"):
            ranks = [p for h in network.hosts for p in h.processes]
            if any(p.poll() is not None for p in ranks) or time.monotonic() > deadline:
                logs = "\n".join((home / f"rank{r}.log").read_text()[-1500:] for r in range(RANKS))
                pytest.fail(f"the ring did not start:\n{logs}")
            time.sleep(0.3)
        env = server_home(
            home, model_folder, WORKERS=f"{DEFAULT_MODEL}={address}", WORKER_SECRET=SECRET
        )
        server = start_daphne(home, env, "ring-daphne")
        yield server, network
    finally:
        if server is not None:
            server.stop()
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
    server, network = ring_lab
    text = _greedy(server.url)
    assert "Paris" in text
    assert text == _greedy(lab_server.url)  # the session's single-host worker
    stats = httpx.get(f"{server.url}/stats", timeout=30).json()
    assert stats["models"][DEFAULT_MODEL]["distributed"] == {"backend": "ring", "ranks": RANKS}
    (worker,) = httpx.get(f"{server.url}/engine", timeout=30).json()["workers"]
    assert worker["remote"] is True and worker["pid"] == network.hosts[0].processes[0].pid


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
