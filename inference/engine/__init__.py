"""The inference engine: plain Python over MLX, no Django."""
# ruff: noqa: E402  (the BLAS must be loaded before the imports below bring in mlx.core)

from .cpu_fast_path import load_blas_from_environment
from .torch_free import keep_torch_out_of_transformers

load_blas_from_environment()
keep_torch_out_of_transformers()

from .bridge import stream_events
from .config import EngineConfig
from .engine import Engine
from .loader import LoadedModel, load_model
from .request import (
    Event,
    Failed,
    Finished,
    GenerationRequest,
    KVScheme,
    SamplingParams,
    TextDelta,
    TokenLogprob,
)

__all__ = [
    "Engine",
    "EngineConfig",
    "Event",
    "Failed",
    "Finished",
    "GenerationRequest",
    "KVScheme",
    "LoadedModel",
    "SamplingParams",
    "TextDelta",
    "TokenLogprob",
    "load_model",
    "stream_events",
]
