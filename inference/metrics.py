"""Prometheus metrics of one web process: vLLM's families under `mlxlab:`, and ours.

Names follow vLLM's with `mlxlab:` for `vllm:` and the same `model_name` label, so a
vLLM dashboard carries over with a rename. Request figures are observed here, as each
answer's events pass through the web process (`RequestMetrics`): every Daphne replica
exports the requests it served, and Prometheus sums the replicas. Worker figures come
from the workers' own reports at scrape time (`WorkerFigures`), one series per replica
(the `replica` label: its place among its model's replicas, "0" for a model's only
worker), job counts from the database.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .protocol.events import Event, Failed, Finished

PREFIX = "mlxlab:"
MODEL = ["model_name"]
REPLICA = [*MODEL, "replica"]

# vLLM's buckets, so its dashboards' quantiles read the same.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
                 50000, 100000, 200000)  # fmt: skip

time_to_first_token = Histogram(
    PREFIX + "time_to_first_token_seconds", "Time from the request to its first token.",
    MODEL, buckets=TTFT_BUCKETS,
)  # fmt: skip
inter_token_latency = Histogram(
    PREFIX + "inter_token_latency_seconds",
    "Time between output tokens (each request's mean, once per token after the first).",
    MODEL, buckets=ITL_BUCKETS,
)  # fmt: skip
e2e_request_latency = Histogram(
    PREFIX + "e2e_request_latency_seconds", "Time from the request to its last token.",
    MODEL, buckets=E2E_BUCKETS,
)  # fmt: skip
request_prompt_tokens = Histogram(
    PREFIX + "request_prompt_tokens", "Prompt tokens of each finished request.",
    MODEL, buckets=TOKEN_BUCKETS,
)  # fmt: skip
request_generation_tokens = Histogram(
    PREFIX + "request_generation_tokens", "Generated tokens of each finished request.",
    MODEL, buckets=TOKEN_BUCKETS,
)  # fmt: skip
prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens of finished requests.", MODEL)
generation_tokens = Counter(
    PREFIX + "generation_tokens", "Generated tokens of finished requests.", MODEL
)
request_success = Counter(
    PREFIX + "request_success",
    "Requests that ended, by finish reason (stop, length, tool_calls; abort: the client "
    "left; error: the generation failed).",
    [*MODEL, "finished_reason"],
)
prefix_cache_queries = Counter(
    PREFIX + "prefix_cache_queries", "Prompt tokens looked up in the prompt cache.", MODEL
)
prefix_cache_hits = Counter(
    PREFIX + "prefix_cache_hits", "Prompt tokens the prompt cache held already.", MODEL
)
spec_decode_draft_tokens = Counter(
    PREFIX + "spec_decode_num_draft_tokens", "Tokens drafted for speculative decoding.", MODEL
)
spec_decode_accepted_tokens = Counter(
    PREFIX + "spec_decode_num_accepted_tokens", "Drafted tokens the model accepted.", MODEL
)
rate_limited = Counter(
    PREFIX + "rate_limited",
    "Requests refused for a limit: requests or tokens per minute, or a monthly quota.",
    ["limit"],
)

CONTENT = "text", "reasoning", "tool"


class RequestMetrics:
    """Watches one request's events (RequestStream's watcher) and records its figures."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = time.monotonic()
        self.first_token: float | None = None

    def event(self, event: Event) -> None:
        if isinstance(event, Finished):
            self._finished(event, time.monotonic())
        elif isinstance(event, Failed):
            request_success.labels(self.model, "error").inc()
        elif self.first_token is None:
            self.first_token = time.monotonic()
            time_to_first_token.labels(self.model).observe(self.first_token - self.started)

    def abandoned(self) -> None:
        """The client left before the end: vLLM's `abort`."""
        request_success.labels(self.model, "abort").inc()

    def settled(self, tally: Finished) -> None:
        """An abandoned request's tally: its generated tokens were generated all the same."""
        prompt_tokens.labels(self.model).inc(tally.prompt_tokens)
        generation_tokens.labels(self.model).inc(tally.completion_tokens)

    def _finished(self, finished: Finished, now: float) -> None:
        model = self.model
        first = self.first_token if self.first_token is not None else now
        if self.first_token is None:  # nothing shown (an empty answer): its end is its first
            time_to_first_token.labels(model).observe(now - self.started)
        e2e_request_latency.labels(model).observe(now - self.started)
        if finished.completion_tokens > 1:
            gap = (now - first) / (finished.completion_tokens - 1)
            latency = inter_token_latency.labels(model)
            for _ in range(finished.completion_tokens - 1):
                latency.observe(gap)
        request_prompt_tokens.labels(model).observe(finished.prompt_tokens)
        request_generation_tokens.labels(model).observe(finished.completion_tokens)
        prompt_tokens.labels(model).inc(finished.prompt_tokens)
        generation_tokens.labels(model).inc(finished.completion_tokens)
        request_success.labels(model, finished.finish_reason).inc()
        prefix_cache_queries.labels(model).inc(finished.prompt_tokens)
        prefix_cache_hits.labels(model).inc(finished.cached_tokens)
        drafted = finished.accepted_prediction_tokens + finished.rejected_prediction_tokens
        spec_decode_draft_tokens.labels(model).inc(drafted)
        spec_decode_accepted_tokens.labels(model).inc(finished.accepted_prediction_tokens)


@dataclass(frozen=True)
class WorkerFigures:
    """One resident replica at scrape time; its load is None when it is not ready or did not
    answer in time; `routed` (reason -> requests) only for a model of several replicas."""

    model: str
    replica: str
    state: str
    restarts: int
    running: int | None = None
    waiting: int | None = None
    kv_cache_bytes: int | None = None
    prompt_cache_bytes: int | None = None
    routed: dict[str, int] | None = None


class WorkersCollector(Collector):
    """The workers' figures of one scrape: load, KV bytes, state and restarts."""

    def __init__(self, workers: list[WorkerFigures]) -> None:
        self.workers = workers

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        running = gauge("num_requests_running", "Requests in the model's batch, generating.")
        waiting = gauge(
            "num_requests_waiting", "Requests sent to the model and not yet in its batch."
        )
        kv = gauge("kv_cache_usage_bytes", "Bytes the batch's KV cache holds now.")
        prompt_cache = gauge("prompt_cache_usage_bytes", "Bytes the prompt cache holds in RAM.")
        state = GaugeMetricFamily(
            PREFIX + "worker_state", "1 for each resident replica's state.",
            labels=[*REPLICA, "state"],
        )  # fmt: skip
        restarts = CounterMetricFamily(
            PREFIX + "worker_restarts", "Times a replica's worker was restarted.", labels=REPLICA
        )
        routed = CounterMetricFamily(
            PREFIX + "replica_routed_requests",
            "Requests this web process sent to a replica, by why: its session, its cached "
            "prefix, or its load.",
            labels=[*REPLICA, "reason"],
        )  # fmt: skip
        for worker in self.workers:
            labels = [worker.model, worker.replica]
            state.add_metric([*labels, worker.state], 1)
            restarts.add_metric(labels, worker.restarts)
            for reason, count in (worker.routed or {}).items():
                routed.add_metric([*labels, reason], count)
            if worker.running is not None:
                running.add_metric(labels, worker.running)
                waiting.add_metric(labels, worker.waiting)
                kv.add_metric(labels, worker.kv_cache_bytes)
                prompt_cache.add_metric(labels, worker.prompt_cache_bytes)
        yield from (running, waiting, kv, prompt_cache, state, restarts, routed)


def gauge(name: str, documentation: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=REPLICA)
