"""The jobs' figure for /metrics: how many jobs of each kind are in each status."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from .models import Job


class JobsCollector(Collector):
    """Counted in the database at scrape time, so every web replica tells the same."""

    def describe(self) -> Iterable[CounterMetricFamily]:
        # Named without a query: the registry asks at registration, before any migration.
        yield _family()

    def collect(self) -> Iterable[CounterMetricFamily]:
        jobs = _family()
        rows = Job.objects.values_list("kind", "status").annotate(count=Count("id"))
        for kind, status, count in sorted(rows):
            jobs.add_metric([kind, status], count)
        yield jobs


def _family() -> CounterMetricFamily:
    return CounterMetricFamily("mlxlab:jobs", "Jobs by kind and status.", labels=["kind", "status"])
