"""Health, statistics, and a client that walks away mid-stream."""

from __future__ import annotations

import json
import time

import httpx

from tests.conftest import ROOT


def test_health_and_stats(http, staff_http, model):
    health = staff_http.get("/health").json()
    assert health["status"] == "ok" and health["in_flight"] == 0
    assert model in health["models_loaded"]
    before = staff_http.get("/stats").json()["generated_tokens"]
    http.post(
        "/v1/completions", json={"model": model, "prompt": "One, two,", "max_tokens": 3}
    ).raise_for_status()
    stats = staff_http.get("/stats").json()
    assert stats["generated_tokens"] == before + 3
    assert stats["models"][model]["decode_tokens_per_second"] > 0
    # What the worker loaded is out of the garbage collector's sight (no 150 ms stalls).
    assert stats["models"][model]["python_objects_frozen"] > 10_000
    assert stats["memory"]["active_bytes"] > 50_000_000  # the model's weights
    fast_path = stats["models"][model]["fast_path"]
    every = sum(m["fast_path"]["quantized_weight_bytes"] for m in stats["models"].values())
    assert stats["memory"]["quantized_weight_bytes"] == every
    if fast_path["path"] == "kernel":  # what each decode step reads, not a float32 copy
        assert fast_path["quantized_weight_bytes"] > 60_000_000
        assert fast_path["dense_weight_bytes"] == 0


def test_stats_carry_mlx_buns_server_block(staff_http, model):
    """The process that answered (`serve`), the default model, when it started (ms)."""
    server = staff_http.get("/stats").json()["server"]
    assert (server["owner"], server["model"]) == ("serve", model)
    assert isinstance(server["started_at"], int)
    assert 0 < time.time() * 1000 - server["started_at"] < 86_400_000


def test_disconnect_mid_stream_frees_the_slot(lab_server, http, staff_http, model):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 300,
        "stream": True,
    }
    cancelled = staff_http.get("/stats").json()["models"][model]["requests_cancelled"]
    with (
        httpx.Client(base_url=lab_server.url, timeout=60) as session,
        session.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        # Keep the line iterator alive: dropping it would close the connection early.
        lines = response.iter_lines()
        frames = [line for _, line in zip(range(3), filter(None, lines), strict=False)]
        assert all(json.loads(frame.removeprefix("data: ")) for frame in frames)
        assert http.get("/health").json()["in_flight"] == 1
    # The worker's own count: its slot is freed at its next step.
    deadline = time.monotonic() + 30
    while staff_http.get("/health").json()["engine"]["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert staff_http.get("/health").json()["engine"]["in_flight"] == 0
    stats = staff_http.get("/stats").json()["models"][model]
    assert stats["requests_cancelled"] == cancelled + 1


def test_a_stranger_learns_nothing_of_the_install(lab_server, http, staff_http, model):
    """Issue 56: /health told anyone the workers' pids, sockets and memory, and /stats and
    /engine the BLAS library's path and every user's counters."""
    assert set(http.get("/health").json()) == {"status", "in_flight"}
    for path in ("/stats", "/engine"):
        assert http.get(path).status_code == 403
    assert staff_http.get("/health").json()["engine"]["socket"]  # staff still see it all
    home = str(lab_server.log_path.parent)
    for path in ("/health", "/stats", "/engine", "/v1/models", f"/v1/models/{model}"):
        text = http.get(path).text
        assert str(ROOT) not in text and home not in text, (path, text)
