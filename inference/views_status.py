"""Health and statistics of the serving process."""

from __future__ import annotations

import time
from dataclasses import asdict

import mlx.core as mx
from django.http import HttpRequest, JsonResponse

from .api.endpoints import api_endpoint
from .engine import Engine
from .engine.cpu_fast_path import blas_state
from .engines import loaded_engines

_started = time.time()


def _in_flight() -> int:
    return sum(engine.in_flight for engine in loaded_engines().values())


@api_endpoint("GET", public=True)  # a liveness probe carries no key
async def health(request: HttpRequest) -> JsonResponse:
    engines = loaded_engines()
    healthy = all(engine.alive for engine in engines.values())
    return JsonResponse(
        {
            "status": "ok" if healthy else "degraded",
            "in_flight": _in_flight(),
            "models_loaded": sorted(engines),
        },
        status=200 if healthy else 503,
    )


@api_endpoint("GET")
async def stats(request: HttpRequest) -> JsonResponse:
    models = {}
    for name, engine in loaded_engines().items():
        s = engine.stats
        models[name] = {
            "in_flight": engine.in_flight,
            "requests_completed": s.requests_completed,
            "requests_failed": s.requests_failed,
            "requests_cancelled": s.requests_cancelled,
            "prompt_tokens": s.prompt_tokens,
            "generated_tokens": s.generated_tokens,
            "decode_tokens_per_second": round(s.tokens_per_second, 3),
            "fast_path": asdict(engine.loaded.fast_path),
            "prompt_cache": _prompt_cache(engine),
        }
    return JsonResponse(
        {
            "status": "ok",
            "uptime_seconds": round(time.time() - _started, 1),
            "in_flight": _in_flight(),
            "generated_tokens": sum(m["generated_tokens"] for m in models.values()),
            "models": models,
            "memory": {
                "active_bytes": mx.get_active_memory(),
                "peak_bytes": mx.get_peak_memory(),
                "cache_bytes": mx.get_cache_memory(),
                "dense_weight_bytes": sum(
                    m["fast_path"]["dense_weight_bytes"] for m in models.values()
                ),
                "prompt_cache_bytes": sum(m["prompt_cache"]["bytes"] for m in models.values()),
            },
            "blas": asdict(blas_state()),
        }
    )


def _prompt_cache(engine: Engine) -> dict:
    cache = engine.prompt_cache
    if cache is None:
        return {"enabled": False, "entries": 0, "bytes": 0}
    return {"enabled": cache.config.enabled, **asdict(cache.stats())}
