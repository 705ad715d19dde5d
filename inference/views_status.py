"""Health, statistics and the engine report, answered by the web process itself.

They never wait on a busy worker for long: a worker that does not answer within
two seconds is reported as unreachable, and the web process keeps answering.

Their detail (pids, socket paths, memory, the BLAS library, every user's counters) is for
staff: a stranger's /health says `status` and `in_flight`, and /stats and /engine are a 403.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async
from django.http import HttpRequest, JsonResponse

from .api.access import caller_is_staff
from .api.endpoints import api_endpoint
from .engines import default_model_name, supervisor
from .response_store import response_store_stats
from .workers.worker import Worker

_started = time.time()
# mlx-bun's `server.owner`: which command's process answered, its `serve` (the serving
# host, as against a model worker); MLX Lab's web process is that host, and answers /stats
# itself whether or not a worker is resident.
OWNER = "serve"


def worker_report(worker: Worker) -> dict:
    """One replica: who and where it is, its state, its load and its prompt cache (as its
    last report, at most MLXLAB's report interval old, gave them)."""
    status = worker.status if worker.state == "ready" else None
    report = {
        "id": worker.id,
        "role": worker.role,  # "companion": a draft model's worker beside its `primary`
        "model": worker.model,
        "replica": worker.replica,
        "pid": worker.pid,
        "state": worker.public_state,
        "restarts": worker.restarts,
        "socket": worker.socket_path or worker.address,
        "remote": worker.remote,  # started on another host (MLXLAB_WORKERS)
        "in_flight": len(worker.streams),  # this web process's requests open there
        "memory": None
        if status is None
        else {
            "active_bytes": status.active_bytes,
            "cache_bytes": status.cache_bytes,
            "peak_bytes": status.peak_bytes,
        },
        "queue": None if status is None else _requests(status)["waiting"],
        "prompt_cache": None if status is None else _cache_figures(status),
        "adapters": list(worker.adapters),  # mounted by an operator (adapter_mounts.py)
    }
    if worker.role == "companion":
        report["primary"] = worker.primary
    elif (routing := supervisor().routing_report(worker)) is not None:
        report["routing"] = routing
    return report


def _requests(status) -> dict:
    return status.stats.get("requests") or {"running": status.in_flight, "waiting": 0}


def _cache_figures(status) -> dict:
    cache = status.stats.get("prompt_cache", {})
    return {key: cache.get(key, 0) for key in ("entries", "bytes", "hits", "cached_tokens")}


async def engine_report(*, with_store: bool = True) -> dict:
    """mlx-bun's EngineReport: the default model's worker, then every resident worker.

    The response store's figures cost a database query: a liveness probe goes without.
    """
    workers = supervisor().resident()
    model = default_model_name()
    # The default model's first serving replica (else its first): one replica stands for it.
    mine = [w for w in workers if w.model == model]
    current = next((w for w in mine if w.serving), mine[0] if mine else None)
    report = {
        "isolated": True,
        "state": current.public_state if current else "none",
        "pid": current.pid if current else None,
        "restarts": current.restarts if current else None,
        "socket": (current.socket_path or current.address) if current else None,
        "model": model,
        "last_exit": current.last_exit.as_dict() if current and current.last_exit else None,
        "workers": [worker_report(w) for w in [*workers, *supervisor().companions()]],
    }
    if with_store:
        report["response_store"] = await sync_to_async(response_store_stats)()
    return report


async def _live(model: str, worker_id: str | None = None):
    """The worker's own report (a ready replica's of `model`, or `worker_id`'s), or None
    when it cannot answer within two seconds."""
    try:
        future = supervisor().live_status(model, 2.0, worker_id=worker_id)
        return await asyncio.wrap_future(future)
    except Exception:
        return None


@api_endpoint("GET", staff=True)
async def engine(request: HttpRequest) -> JsonResponse:
    return JsonResponse(await engine_report())


@api_endpoint("GET", public=True)  # a liveness probe carries no key
async def health(request: HttpRequest) -> JsonResponse:
    report = await engine_report(with_store=False)
    report.pop("isolated")
    workers = report.pop("workers")
    if report["state"] == "ready":
        status = await _live(report["model"])
        report["in_flight"] = status.in_flight if status else None
        if status is None:
            report["state"] = "unreachable"
    # A draft model's companion serves no requests of its own: it loads no model here.
    ready = {w["model"] for w in workers if w["state"] == "ready" and w["role"] == "primary"}
    # Healthy while any worker can serve, or none has failed yet (one starts on demand).
    healthy = bool(ready) or all(w["state"] in ("starting", "draining") for w in workers)
    body = {
        "status": "ok" if healthy else "degraded",
        "in_flight": sum(len(w.streams) for w in supervisor().resident()),
    }
    if await caller_is_staff(request):
        body.update(isolated=True, engine=report, workers=workers, models_loaded=sorted(ready))
    return JsonResponse(body, status=200 if healthy else 503)


@api_endpoint("GET", staff=True)
async def stats(request: HttpRequest) -> JsonResponse:
    report = await engine_report()
    ready = [w for w in supervisor().resident() if w.state == "ready"]
    statuses = await asyncio.gather(*(_live(w.model, w.id) for w in ready))
    answered = [(w, s) for w, s in zip(ready, statuses, strict=True) if s is not None]
    models = _model_stats(answered)
    body = {
        "status": "ok",
        # started_at in milliseconds since the epoch, as mlx-bun's (JavaScript's Date.now()).
        "server": {"owner": OWNER, "model": report["model"], "started_at": int(_started * 1000)},
        "uptime_seconds": round(time.time() - _started, 1),
        "in_flight": sum(m["in_flight"] for m in models.values()),
        "generated_tokens": sum(m["generated_tokens"] for m in models.values()),
        "models": models,
        "memory": {
            "active_bytes": sum(s.active_bytes for s in statuses if s),
            "peak_bytes": sum(s.peak_bytes for s in statuses if s),
            "cache_bytes": sum(s.cache_bytes for s in statuses if s),
            # Every replica's. A worker reports what it has (a distributed rank has no prompt
            # cache): absent is 0.
            "dense_weight_bytes": _total(answered, "fast_path", "dense_weight_bytes"),
            "quantized_weight_bytes": _total(answered, "fast_path", "quantized_weight_bytes"),
            "prompt_cache_bytes": _total(answered, "prompt_cache", "bytes"),
            "kv_cache_bytes": _total(answered, "kv_cache", "bytes"),
        },
        "blas": next(iter(models.values()))["blas"] if models else None,
        "engine": report,
        "response_store": report["response_store"],
    }
    if not models:
        body["unavailable"] = "inference engine unavailable: no model worker is resident"
    return JsonResponse(body)


def _model_stats(answered: list) -> dict:
    """Each model's figures: its first replica's report, with the load and token counts
    summed over its replicas, and with several replicas each one's own under `replicas`."""
    models: dict[str, dict] = {}
    for worker, status in answered:
        entry = {"in_flight": status.in_flight, **status.stats}
        model = models.get(worker.model)
        if model is None:
            models[worker.model] = model = entry
            model["replicas"] = []
        else:
            for figure in SUMMED:
                model[figure] = model.get(figure, 0) + entry.get(figure, 0)
        model["replicas"].append(
            {"id": worker.id, "replica": worker.replica, "address": worker.address,
             **{figure: entry.get(figure, 0) for figure in SUMMED},
             "requests": _requests(status), "prompt_cache": _cache_figures(status)}
        )  # fmt: skip
    for model in models.values():
        if len(model["replicas"]) < 2:
            del model["replicas"]
    return models


# What several replicas of a model add up to in its /stats entry.
SUMMED = ("in_flight", "generated_tokens", "prompt_tokens", "requests_completed",
          "requests_failed", "requests_cancelled")  # fmt: skip


def _total(answered: list, part: str, figure: str) -> int:
    return sum(status.stats.get(part, {}).get(figure, 0) for _, status in answered)
