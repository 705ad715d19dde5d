"""A distributed worker's ranks hold each other's lifelines (inference/engine/process/lifeline.py):
real processes holding them over loopback TCP, no model and no ring. One rank lost, by
death or by silence, and every other rank exits with RANK_LOST; an orderly stop does not."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from inference.engine.process.lifeline import RANK_LOST

ROOT = Path(__file__).resolve().parents[2]
# lifeline.py alone, by its path: the engine package's import would load MLX in every rank.
RANK = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("lifeline", "inference/engine/process/lifeline.py")
lifeline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lifeline)
Lifelines, lifeline_address = lifeline.Lifelines, lifeline.lifeline_address
rank, size, listen = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lifelines = Lifelines(rank=rank, size=size, timeout=1.0,
                      address=lifeline_address(listen, "127.0.0.1"))
lifelines.hold()
print("held", flush=True)
if sys.argv[4:] == ["stop"]:  # an orderly stop: the others are told first, then it exits
    lifelines.stopping = True
    time.sleep(1)
    sys.exit(0)
time.sleep(600)
"""


def _listen_address() -> str:
    """A worker address whose next port (the lifelines') is free."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1] - 1}"


def _ranks(size: int, *extra: str) -> list[subprocess.Popen]:
    listen = _listen_address()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(rank), str(size), listen, *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in range(size)
    ]
    for process in ranks:
        assert process.stdout.readline().strip() == "held"
    return ranks


@pytest.fixture
def started():
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def _exit_status(process: subprocess.Popen) -> int:
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pid {process.pid} is still running: it hangs")


@pytest.mark.parametrize("victim", [0, 2])
def test_a_rank_that_dies_takes_every_other_rank_down(started, victim):
    started += _ranks(3)
    os.kill(started[victim].pid, signal.SIGKILL)
    others = [p for rank, p in enumerate(started) if rank != victim]
    assert [_exit_status(p) for p in others] == [RANK_LOST, RANK_LOST]


def test_a_rank_gone_silent_takes_the_others_down(started):
    """SIGSTOP: its sockets stay open, as a host that drops off the network leaves them."""
    started += _ranks(2)
    os.kill(started[1].pid, signal.SIGSTOP)
    assert _exit_status(started[0]) == RANK_LOST


def test_an_orderly_stop_is_not_a_lost_rank(started):
    started += _ranks(2, "stop")
    assert [_exit_status(p) for p in started] == [0, 0]
