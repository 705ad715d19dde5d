"""/metrics on the live server: vLLM's families under `mlxlab:` move as requests finish,
hit the prompt cache, draft, stream and are abandoned."""

from __future__ import annotations

import json
import re
import time
import uuid

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT


def scrape(staff_http: httpx.Client) -> dict[tuple, float]:
    """Every sample of one scrape, keyed by (name, sorted labels)."""
    response = staff_http.get("/metrics")
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((f"mlxlab:{name}", tuple(sorted(labels.items()))), 0.0)


def idle_scrape(staff_http: httpx.Client, model: str) -> dict[tuple, float]:
    """A scrape once the model's worker holds no request: an earlier test's request that
    ends inside ours would move the counters too."""
    deadline = time.monotonic() + 30
    while True:
        samples = scrape(staff_http)
        busy = sum(value(samples, f"num_requests_{what}", model_name=model, replica="0")
                   for what in ("running", "waiting"))  # fmt: skip
        if not busy or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def anonymous_usage(staff_http: httpx.Client) -> dict:
    """Today's usage of the open API's callers (no key), as /api/usage totals it."""
    rows = staff_http.get("/api/usage?group_by=key").json()["data"]
    empty = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    return next((row for row in rows if row["group"] == "anonymous"), empty)


def test_request_figures_move_with_finished_cached_and_drafted_requests(client, staff_http, model):
    messages = [{"role": "user", "content": f"Note {uuid.uuid4().hex[:8]}: name a colour."}]
    common = {"model": model, "messages": messages, "max_tokens": 6, "temperature": 0}
    before = idle_scrape(staff_http, model)
    first = client.chat.completions.create(**common)
    # The same prompt again: a prompt-cache hit, drafted from the first reply.
    prediction = {"type": "content", "content": first.choices[0].message.content}
    second = client.chat.completions.create(**common, extra_body={"prediction": prediction})
    after = scrape(staff_http)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, model_name=model, **labels) - value(
            before, name, model_name=model, **labels
        )

    replies = (first, second)
    assert moved("prompt_tokens_total") == sum(r.usage.prompt_tokens for r in replies)
    assert moved("generation_tokens_total") == sum(r.usage.completion_tokens for r in replies)
    reasons = [r.choices[0].finish_reason for r in replies]
    for reason in set(reasons):
        assert moved("request_success_total", finished_reason=reason) == reasons.count(reason)
    assert moved("time_to_first_token_seconds_count") == 2
    assert moved("e2e_request_latency_seconds_count") == 2
    assert moved("request_generation_tokens_sum") == moved("generation_tokens_total")
    intervals = sum(max(r.usage.completion_tokens - 1, 0) for r in replies)
    assert moved("inter_token_latency_seconds_count") == intervals
    cached = [r.usage.prompt_tokens_details.cached_tokens for r in replies]
    assert cached[1] > cached[0]  # the second found the first's prompt
    assert moved("prefix_cache_hits_total") == sum(cached)
    assert moved("prefix_cache_queries_total") == moved("prompt_tokens_total")
    drafted = second.usage.completion_tokens_details
    assert drafted.accepted_prediction_tokens > 0
    assert moved("spec_decode_num_accepted_tokens_total") == drafted.accepted_prediction_tokens
    assert moved("spec_decode_num_draft_tokens_total") == (
        drafted.accepted_prediction_tokens + drafted.rejected_prediction_tokens
    )
    assert value(after, "worker_state", model_name=model, replica="0", state="ready") == 1


def test_a_running_stream_and_its_abandonment_show(lab_server, staff_http, model):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 300,
        "stream": True,
    }
    before = scrape(staff_http)
    used_before = anonymous_usage(staff_http)
    with (
        httpx.Client(base_url=lab_server.url, timeout=60) as session,
        session.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        lines = response.iter_lines()  # kept alive: dropping it would close the stream early
        frames = [line for _, line in zip(range(3), filter(None, lines), strict=False)]
        assert all(json.loads(frame.removeprefix("data: ")) for frame in frames)
        # The worker counts its KV bytes at the end of a step, after that step's tokens left.
        deadline = time.monotonic() + 10
        while not value(during := scrape(staff_http), "kv_cache_usage_bytes", model_name=model,
                        replica="0") and time.monotonic() < deadline:  # fmt: skip
            time.sleep(0.05)
        assert value(during, "num_requests_running", model_name=model, replica="0") == 1
        assert value(during, "num_requests_waiting", model_name=model, replica="0") == 0
        assert value(during, "kv_cache_usage_bytes", model_name=model, replica="0") > 0
    deadline = time.monotonic() + 30
    aborted = value(before, "request_success_total", model_name=model, finished_reason="abort")
    while time.monotonic() < deadline:
        after = scrape(staff_http)
        if value(after, "request_success_total", model_name=model, finished_reason="abort"):
            break
        time.sleep(0.1)
    assert value(after, "request_success_total", model_name=model, finished_reason="abort") == (
        aborted + 1
    )
    # The usage record counts what it generated before the client left (the worker's tally).
    deadline = time.monotonic() + 10
    while (used := anonymous_usage(staff_http))["requests"] == used_before["requests"]:
        assert time.monotonic() < deadline, used
        time.sleep(0.1)
    assert used["requests"] == used_before["requests"] + 1
    assert used["completion_tokens"] - used_before["completion_tokens"] >= len(frames) - 1
    assert used["prompt_tokens"] > used_before["prompt_tokens"]
    first_tokens = "time_to_first_token_seconds_count"
    assert (
        value(after, first_tokens, model_name=model)
        == value(before, first_tokens, model_name=model) + 1
    )


def test_the_grafana_dashboard_reads_only_families_the_server_exports(staff_http):
    dashboard = json.loads((ROOT / "docs" / "grafana" / "mlxlab-dashboard.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    wanted = {
        re.sub(r"_(bucket|total|sum|count)$", "", name)
        for query in queries
        for name in re.findall(r"mlxlab:[a-z0-9_]+", query)
    }
    exported = {
        family.name for family in text_string_to_metric_families(staff_http.get("/metrics").text)
    }
    assert len(wanted) >= 12 and wanted <= exported, wanted - exported
