"""Residency of model workers: a memory bound and an idle timeout, on real worker processes."""

from __future__ import annotations

import time

import pytest

from tests.api.test_model_workers import SECOND, THIRD, _copy
from tests.conftest import DEFAULT_MODEL, _manage, server_home, start_daphne


@pytest.fixture(scope="module")
def lab(tmp_path_factory, model_folder, redis_url):
    """Room for three models by count, but a memory bound (1 MB) that no second one fits."""
    home = tmp_path_factory.mktemp("residency")
    env = server_home(
        home, model_folder, MAX_LOADED_MODELS="3", MODEL_MEMORY_MB="1", MODEL_IDLE_SECONDS="3"
    )
    for name in (SECOND, THIRD):
        _manage(env, "add_model", str(_copy(model_folder, home / name)), "--name", name)
    server = start_daphne(home, env, "residency-daphne")
    try:
        with server.staff_client(timeout=120) as client:  # /engine is for staff
            yield client
    finally:
        server.stop()


def _resident(lab) -> set[str]:
    return {w["model"] for w in lab.get("/engine").json()["workers"]}


def _complete(lab, model: str) -> None:
    body = {"model": model, "prompt": "Hi", "max_tokens": 2}
    assert lab.post("/v1/completions", json=body).status_code == 200


def test_the_memory_bound_evicts_the_least_recently_used_and_idle_models_unload(lab):
    _complete(lab, SECOND)
    assert _resident(lab) == {DEFAULT_MODEL, SECOND}  # only the pinned default to evict
    _complete(lab, THIRD)
    # Over the memory bound: the second model went, though the count allows three.
    assert _resident(lab) == {DEFAULT_MODEL, THIRD}
    deadline = time.monotonic() + 30
    while THIRD in _resident(lab) and time.monotonic() < deadline:
        time.sleep(0.5)
    # Idle past MLXLAB_MODEL_IDLE_SECONDS: unloaded; the default model is pinned.
    assert _resident(lab) == {DEFAULT_MODEL}
    _complete(lab, DEFAULT_MODEL)
