"""The inference engine: plain Python over MLX, no Django. A process that runs it calls
`startup.prepare_mlx_process()` before anything imports mlx.core.

Importing this package loads nothing: the names below are looked up on first use, so
`inference.engine.startup` can run before MLX is imported.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Engine": ".engine",
    "EngineConfig": ".config",
    "GenerationRequest": ".request",
    "LoadedModel": ".loader",
    "load_model": ".loader",
    "stream_events": ".bridge",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
