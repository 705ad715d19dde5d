"""What a model worker reports of itself (`/stats`, `/engine`, `/metrics`): load, memory,
counters, and how its fast paths and caches stand."""

from __future__ import annotations

import os
from dataclasses import asdict

import mlx.core as mx

from ...protocol import wire
from ..acceleration.accelerator import device_name
from ..acceleration.cpu_fast_path import blas_state
from ..loop.config import EngineStats
from ..loop.engine import Engine


def worker_status(model: str, engine: Engine, frozen: int = 0) -> wire.WorkerStatus:
    """`frozen`: the objects `gc.freeze()` hid, counted once (counting walks them all: tens
    of milliseconds with the GIL held, a decode step stalled at every report)."""
    stats = engine.stats
    cache = engine.prompt_cache
    return wire.WorkerStatus(
        model=model,
        pid=os.getpid(),
        in_flight=engine.in_flight,
        active_bytes=mx.get_active_memory(),
        cache_bytes=mx.get_cache_memory(),
        peak_bytes=mx.get_peak_memory(),
        stats={
            "requests_completed": stats.requests_completed,
            "requests_failed": stats.requests_failed,
            "requests_cancelled": stats.requests_cancelled,
            "prompt_tokens": stats.prompt_tokens,
            "generated_tokens": stats.generated_tokens,
            "decode_tokens_per_second": round(stats.tokens_per_second, 3),
            "requests": requests_report(engine),
            "fast_path": asdict(engine.loaded.fast_path),
            "batching": batching_report(engine),
            "prompt_cache": (
                {"enabled": cache.config.enabled, **asdict(cache.stats())}
                if cache is not None
                else {"enabled": False, "entries": 0, "bytes": 0}
            ),
            "kv_cache": kv_cache_report(stats),
            # Mounted by an operator, and loaded at all (a request named it): adapter_set.py.
            "adapters": engine.runner.adapters.report if engine.runner is not None else {},
            "checkpoints": (
                engine.runner.checkpoints.stats()
                if engine.runner is not None and engine.runner.checkpoints is not None
                else {"enabled": False}
            ),
            "speculative": {
                "verify_steps": stats.verify_steps,
                "drafted_tokens": stats.drafted_tokens,
                "accepted_tokens": stats.accepted_tokens,
                "acceptance_rate": round(stats.acceptance_rate, 4),
                "fast_forwarded_tokens": stats.fast_forwarded_tokens,
                "draft_models": list(stats.draft_models),
            },
            "context_length": engine.context_length,
            "blas": asdict(blas_state()),
            "device": device_name(),
            "warm_up_seconds": round(stats.warm_up_seconds, 3),
            "python_objects_frozen": frozen,
        },
    )


def requests_report(engine) -> dict:
    """Requests generating in the batch, and those sent but not yet in it (being
    prepared, prefilling, or parked behind another adapter set)."""
    in_flight = engine.in_flight
    running = min(engine.runner.size if engine.runner is not None else 0, in_flight)
    return {"running": running, "waiting": in_flight - running}


def batching_report(engine) -> dict:
    """How the model's rows share a batch (loop/batch_caches.py): together, or one at a
    time, and why."""
    alone = engine.unbatchable
    return {
        "rows": "one at a time" if alone else "together",
        "prompts": "one at a time" if alone or engine.prefills_alone else "together",
        "why": alone or engine.prefills_alone,
    }


def kv_cache_report(stats: EngineStats) -> dict:
    """The batch's KV cache bytes (prompt-cache entries apart), now and at most, by scheme."""
    live, peaks = dict(stats.kv_bytes), dict(stats.kv_peak_bytes)
    return {
        "bytes": sum(live.values()),
        "peak_bytes": stats.kv_peak_total,
        "by_scheme": {
            label: {"bytes": live.get(label, 0), "peak_bytes": peak}
            for label, peak in sorted(peaks.items())
        },
    }
