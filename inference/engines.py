"""The models loaded in this process, one engine each, loaded on first use."""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections import OrderedDict

from django.conf import settings

from .api.errors import model_not_found
from .engine import Engine, EngineConfig, load_model
from .engine.dense_weights import FastPathOptions
from .engine.prompt_cache import PromptCacheConfig
from .models import LanguageModel

log = logging.getLogger(__name__)

_engines: OrderedDict[str, Engine] = OrderedDict()  # most recently used last
_lock = threading.Lock()  # loads happen on worker threads, one at a time


def default_model_name() -> str:
    return settings.MLXLAB["DEFAULT_MODEL"]


def loaded_engines() -> dict[str, Engine]:
    return dict(_engines)


def _engine_config() -> EngineConfig:
    options = settings.MLXLAB
    return EngineConfig(
        max_batch_size=options["MAX_BATCH_SIZE"],
        prefill_step_size=options["PREFILL_STEP_SIZE"],
        prompt_cache=PromptCacheConfig(
            max_entries=options["PROMPT_CACHE_ENTRIES"],
            max_bytes=options["PROMPT_CACHE_MB"] << 20,
        ),
    )


def _fast_path_options() -> FastPathOptions:
    options = settings.MLXLAB
    return FastPathOptions(
        enabled=options["CPU_FAST_PATH"],
        dense_weight_budget_bytes=options["DENSE_WEIGHT_BUDGET_MB"] << 20,
    )


def load_engine(record: LanguageModel) -> Engine:
    """The running engine for a registered model, starting it if needed (blocking)."""
    with _lock:
        engine = _engines.get(record.name)
        if engine is not None and engine.alive:
            _engines.move_to_end(record.name)
            return engine
        log.info("loading model %s from %s", record.name, record.path)
        fast_path = _fast_path_options()
        engine = Engine(
            lambda: load_model(record.path, fast_path=fast_path), config=_engine_config()
        ).start()
        _engines[record.name] = engine
        _evict_beyond(settings.MLXLAB["MAX_LOADED_MODELS"])
        return engine


def _evict_beyond(limit: int) -> None:
    while len(_engines) > max(limit, 1):
        name, engine = _engines.popitem(last=False)
        log.info("unloading model %s to make room", name)
        engine.shutdown()


@atexit.register
def shutdown_engines() -> None:
    """Stop every engine thread before the interpreter tears MLX down.

    An engine thread still holding MLX state at exit aborts the process
    ("terminate called without an active exception") instead of exiting cleanly.
    """
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.shutdown(timeout=5)


def unload_engine(name: str) -> bool:
    with _lock:
        engine = _engines.pop(name, None)
    if engine is None:
        return False
    engine.shutdown()
    return True


async def get_engine(name: str | None) -> tuple[str, Engine]:
    """(model name, engine) for a request's `model` field; 404 when unknown."""
    name = name or default_model_name()
    engine = _engines.get(name)
    if engine is not None and engine.alive:
        return name, engine
    record = await LanguageModel.objects.filter(name=name).afirst()
    if record is None:
        raise model_not_found(name)
    return name, await asyncio.to_thread(load_engine, record)


def preload_default_in_background() -> None:
    """Warm the default model so the first request does not pay for the load."""

    def warm() -> None:
        record = LanguageModel.objects.filter(name=default_model_name()).first()
        if record is None:
            log.warning("default model %s is not registered", default_model_name())
            return
        try:
            load_engine(record)
        except Exception:
            log.exception("could not preload %s", record.name)

    threading.Thread(target=warm, name="preload-default-model", daemon=True).start()
