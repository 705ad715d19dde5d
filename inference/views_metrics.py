"""GET /metrics: the Prometheus text format (inference/metrics.py says what it holds).

For staff, through a key or a session; with MLXLAB_METRICS=loopback, also for any caller
on this host (a Prometheus beside the lab).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from labsettings import lab_settings

from .api.access import api_access_error, caller_is_staff, staff_only
from .api.endpoints import api_endpoint
from .engines import supervisor
from .errors import ApiError
from .metrics import WorkerFigures, WorkersCollector
from .workers.worker import Worker


@api_endpoint("GET", public=True)  # its own access rule: loopback may scrape without a key
async def metrics(request: HttpRequest) -> HttpResponse:
    if not (_loopback_may_scrape(request) or await caller_is_staff(request)):
        if denied := await api_access_error(request):
            response = ApiError.response(denied)
            response["WWW-Authenticate"] = 'Bearer realm="mlxlab"'
            return response
        return ApiError.response(staff_only())
    workers = await asyncio.gather(*(_figures(w) for w in supervisor().resident()))
    body = await sync_to_async(_render)(list(workers))
    # The classic text format's type: what every Prometheus, 2.x as 3.x, reads.
    return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)


def _loopback_may_scrape(request: HttpRequest) -> bool:
    if lab_settings.metrics_access != "loopback":
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def _render(workers: list[WorkerFigures]) -> bytes:
    """The process's families (requests, jobs), then this scrape's workers."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(WorkersCollector(workers))
    return generate_latest(REGISTRY) + generate_latest(scrape)


async def _figures(worker: Worker) -> WorkerFigures:
    routing = supervisor().routing_report(worker)
    figures = WorkerFigures(
        worker.model, str(worker.replica), worker.public_state, worker.restarts,
        routed=routing["routed"] if routing is not None else None,
    )  # fmt: skip
    if worker.state != "ready":
        return figures
    try:
        future = supervisor().live_status(worker.model, 2.0, worker_id=worker.id)
        status = await asyncio.wrap_future(future)
    except Exception:  # busy past two seconds, or gone: its state says enough
        return figures
    if status is None:
        return figures
    requests = status.stats.get("requests") or {"running": status.in_flight, "waiting": 0}
    return dataclasses.replace(
        figures, running=requests["running"], waiting=requests["waiting"],
        kv_cache_bytes=status.stats.get("kv_cache", {}).get("bytes", 0),
        prompt_cache_bytes=status.stats.get("prompt_cache", {}).get("bytes", 0),
    )  # fmt: skip
