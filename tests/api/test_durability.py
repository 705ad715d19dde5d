"""What survives a model worker's death or a client's hang-up: the prompt cache's disk
tier and resumable generation, on real worker processes behind a real Daphne.

A module of its own with its own server (as tests/api/test_model_workers.py): its tests
kill workers, which must not disturb the session's shared server.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests.api.test_model_workers import Lab, _copy
from tests.conftest import DEFAULT_MODEL, _manage, server_home, start_daphne

COLD = "cold-copy"  # the default model's weights under another name: a cache of its own


@pytest.fixture(scope="module")
def lab(tmp_path_factory, model_folder, redis_url):
    home = tmp_path_factory.mktemp("durability")
    env = server_home(home, model_folder, MAX_LOADED_MODELS="2", ENGINE_WAIT_SECONDS="60")
    _manage(env, "add_model", str(_copy(model_folder, home / COLD)), "--name", COLD)
    server = start_daphne(home, env, "durability-daphne")
    try:
        yield Lab(server)
    finally:
        server.stop()


def prompt_cache(lab: Lab, model: str = DEFAULT_MODEL) -> dict:
    return lab.staff.get("/stats").json()["models"][model]["prompt_cache"]


def restart(lab: Lab, model: str = DEFAULT_MODEL) -> dict:
    """SIGKILL the model's worker; its successor, once ready."""
    before = lab.ready(model)
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        worker = lab.worker(model)
        if worker and worker["state"] == "ready" and worker["pid"] != before["pid"]:
            return worker
        time.sleep(0.2)
    pytest.fail(f"the worker for {model} did not come back: {lab.engine()}")


def wait_for_disk_writes(lab: Lab, count: int) -> dict:
    deadline = time.monotonic() + 30
    while (stats := prompt_cache(lab))["disk_writes"] < count:
        assert time.monotonic() < deadline, stats
        time.sleep(0.1)
    return stats


def test_a_prompt_cache_hit_after_a_worker_restart_answers_as_a_cold_run(lab):
    lab.ready(DEFAULT_MODEL)
    # A fixed prompt: a warm prefill sums in other chunks than a cold one, which moves
    # logits in their last bits, and a random prompt now and then met a near-tie there.
    system = {"role": "system", "content": "Conversation 7d2e. Be brief."}
    turn1 = [system, {"role": "user", "content": "Name three fish."}]
    greedy = {"max_tokens": 12, "temperature": 0}
    writes = prompt_cache(lab)["disk_writes"]
    first = lab.openai.chat.completions.create(model=DEFAULT_MODEL, messages=turn1, **greedy)
    # The prompt up to the assistant's header during prefill, then prompt and reply.
    assert wait_for_disk_writes(lab, writes + 2)["disk_entries"] >= 1
    turn2 = [
        *turn1,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And three birds?"},
    ]
    cold = lab.openai.chat.completions.create(model=COLD, messages=turn2, **greedy)
    assert cold.usage.prompt_tokens_details.cached_tokens <= 3  # `<|im_start|>system\n`

    restart(lab)
    after = prompt_cache(lab)
    assert after["disk_enabled"] and after["disk_entries"] >= 1 and after["lookups"] == 0
    warm = lab.openai.chat.completions.create(model=DEFAULT_MODEL, messages=turn2, **greedy)
    assert warm.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    assert warm.choices[0].message.content == cold.choices[0].message.content
    assert prompt_cache(lab)["disk_hits"] == 1


# -- resumable generation ---------------------------------------------------------------

STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to sail."}]


@dataclass
class Streamed:
    text: str = ""
    chunks: int = 0
    usage: object = None
    resumed_from: str | None = None  # the X-Resumed-From header
    error: Exception | None = None


def stream(lab: Lab, *, interrupt=None, at: int = 10, **fields) -> Streamed:
    """A streamed chat completion of STORY; `interrupt(stream)` runs at the `at`th chunk."""
    body = {"max_tokens": 60, "temperature": 0.8, **fields}
    raw = lab.openai.chat.completions.with_raw_response.create(
        model=DEFAULT_MODEL,
        messages=STORY,
        stream=True,
        stream_options={"include_usage": True},
        **body,
    )
    out = Streamed(resumed_from=raw.headers.get("x-resumed-from"))
    events = raw.parse()
    try:
        for chunk in events:
            out.usage = chunk.usage or out.usage
            if chunk.choices and chunk.choices[0].delta.content:
                out.text += chunk.choices[0].delta.content
                out.chunks += 1
                stopped = out.chunks == at and interrupt is not None and interrupt(events)
                if stopped == "left":
                    return out
    except openai.APIError as error:  # the error frame of a worker killed mid-stream
        out.error = error
    return out


def hang_up(events) -> str:
    events.close()  # the client goes: the server sees the connection close
    time.sleep(0.5)
    return "left"


def checkpoint_files(lab: Lab) -> list[Path]:
    folder = Path(lab.server.env["MLXLAB_CHECKPOINT_DIR"])
    return [path for path in folder.glob("*.ckpt") if not path.name.startswith(".")]


def checkpoint_files_settled(lab: Lab, seconds: float = 10.0) -> list[Path]:
    """The checkpoints once the writer thread has caught up: a finished generation's file
    is deleted off the decode path, just after its Finished event went out."""
    deadline = time.monotonic() + seconds
    while (files := checkpoint_files(lab)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return files


def test_a_seeded_stream_whose_worker_is_killed_resumes_into_the_uninterrupted_text(lab):
    lab.ready(DEFAULT_MODEL)
    whole = stream(lab, seed=41)
    assert whole.resumed_from is None and whole.usage.completion_tokens == 60
    pid = lab.ready(DEFAULT_MODEL)["pid"]
    killed = stream(lab, seed=41, interrupt=lambda events: os.kill(pid, signal.SIGKILL))
    assert killed.error is not None and killed.chunks >= 10

    retry = stream(lab, seed=41)
    assert retry.text == whole.text and retry.text.startswith(killed.text)
    # The last periodic checkpoint (every 8 tokens) before the kill, at token 10 or later.
    assert int(retry.resumed_from) >= 8 and int(retry.resumed_from) % 8 == 0
    assert retry.usage.model_extra["resumed_from"] == int(retry.resumed_from)
    assert retry.usage.completion_tokens == 60


def test_a_seeded_stream_whose_client_hangs_up_resumes_into_the_uninterrupted_text(lab):
    whole = stream(lab, seed=42, max_tokens=50)
    left = stream(lab, seed=42, max_tokens=50, interrupt=hang_up)
    assert left.chunks == 10
    retry = stream(lab, seed=42, max_tokens=50)
    assert int(retry.resumed_from) >= 10  # checkpointed when the client left
    assert retry.text == whole.text and retry.text.startswith(left.text)


def test_a_request_without_a_seed_resumes_on_the_seed_its_first_attempt_drew(lab):
    left = stream(lab, interrupt=hang_up)
    (checkpoint,) = checkpoint_files(lab)
    drawn = json.loads(checkpoint.read_text().splitlines()[0])["seed"]
    retry = stream(lab)
    assert int(retry.resumed_from) >= 10 and retry.text.startswith(left.text)
    # Uninterrupted, with that seed set by the client: the same text.
    assert stream(lab, seed=drawn).text == retry.text


def test_a_retry_with_another_seed_or_stop_list_starts_afresh(lab):
    left = stream(lab, seed=43, interrupt=hang_up)
    other_seed = stream(lab, seed=44)
    other_stop = stream(lab, seed=43, stop=["zebra"])
    assert other_seed.resumed_from is None and "resumed_from" not in other_seed.usage.model_extra
    assert other_stop.resumed_from is None and "resumed_from" not in other_stop.usage.model_extra
    retry = stream(lab, seed=43)  # the checkpoint is still there for the identical retry
    assert int(retry.resumed_from) >= 10 and retry.text.startswith(left.text)
    assert checkpoint_files_settled(lab) == []  # finished: deleted
