"""The inference engine: plain Python over MLX, no Django."""

from .bridge import stream_events
from .loader import LoadedModel, load_model
from .request import (
    Event,
    Failed,
    Finished,
    GenerationRequest,
    SamplingParams,
    TextDelta,
    TokenLogprob,
)
from .scheduler import Engine, EngineConfig

__all__ = [
    "Engine",
    "EngineConfig",
    "Event",
    "Failed",
    "Finished",
    "GenerationRequest",
    "LoadedModel",
    "SamplingParams",
    "TextDelta",
    "TokenLogprob",
    "load_model",
    "stream_events",
]
