"""The inference engine: plain Python over MLX, no Django. A process that runs it calls
`process.startup.prepare_mlx_process()` before anything imports mlx.core.

Its floors, each importing only those below it: kv, media, acceleration, embedding, drafts,
prompting, caching, loop, process (tests/test_engine_floors.py).

Importing this package loads nothing: the names below are looked up on first use, so
`inference.engine.process.startup` can run before MLX is imported.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Engine": ".loop.engine",
    "EngineConfig": ".loop.config",
    "GenerationRequest": ".prompting.request",
    "LoadedModel": ".acceleration.loader",
    "load_model": ".acceleration.loader",
    "stream_events": ".loop.bridge",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
