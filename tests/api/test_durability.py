"""What survives a model worker's death: the prompt cache's disk tier, on real worker
processes behind a real Daphne.

A module of its own with its own server (as tests/api/test_model_workers.py): its tests
kill workers, which must not disturb the session's shared server.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

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
    return lab.http.get("/stats").json()["models"][model]["prompt_cache"]


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
    system = {"role": "system", "content": f"Conversation {uuid.uuid4().hex[:8]}. Be brief."}
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
