"""The table's rows for model workers (inference/workers), and their cross-check.

Which model is served by default, how many stay loaded, how long a request waits for
one, and workers on other hosts with the secret their links share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from .parsers import (
    MIN_SECRET_CHARS,
    one_of,
    parse_bool,
    parse_float,
    parse_int,
    parse_replica_counts,
    parse_worker_addresses,
    reaches_beyond_loopback,
)
from .places import PlaceSettings
from .rows import setting, under_var


# Below the places, not beside them: kernel_cache_dir's default reads var_dir.
@dataclass(frozen=True)
class WorkerSettings(PlaceSettings):
    """Models and their workers."""

    default_model: str = setting(
        "MLXLAB_DEFAULT_MODEL", str, "smollm2-135m-instruct",
        "The model of requests that name none; its worker is never evicted.",
    )  # fmt: skip
    preload_default_model: bool = setting(
        "MLXLAB_PRELOAD", parse_bool, True, "Load the default model when the web process starts."
    )
    max_loaded_models: int = setting(
        "MLXLAB_MAX_LOADED_MODELS", parse_int, 2, "Model workers resident at once."
    )
    model_memory_mb: int = setting(
        "MLXLAB_MODEL_MEMORY_MB", parse_int, 0,
        "Memory of the resident workers, as they report it; 0: no bound.",
    )  # fmt: skip
    model_idle_seconds: float = setting(
        "MLXLAB_MODEL_IDLE_SECONDS", parse_float, 1800.0,
        "A model idle this long unloads; 0: never.",
    )  # fmt: skip
    engine_wait_seconds: float = setting(
        "MLXLAB_ENGINE_WAIT_SECONDS", parse_float, 30.0,
        "How long a request waits for a restarting worker before its 502.",
    )  # fmt: skip
    model_load_seconds: float = setting(
        "MLXLAB_MODEL_LOAD_SECONDS", parse_float, 600.0,
        "How long a worker may take to load its model before it counts as failed.",
    )  # fmt: skip
    template_render_seconds: float = setting(
        "MLXLAB_TEMPLATE_RENDER_SECONDS", parse_float, 10.0,
        "A chat template render that takes longer is a 400.",
    )  # fmt: skip
    max_batch_size: int = setting(
        "MLXLAB_MAX_BATCH_SIZE", parse_int, 8, "Sequences one worker decodes together."
    )
    prefill_step_size: int = setting(
        "MLXLAB_PREFILL_STEP_SIZE", parse_int, 512, "Prompt tokens per prefill step."
    )
    # An embedding model's worker (engine/embedding/batching.py): inputs sorted by length
    # and padded within buckets; this bounds one forward pass's memory.
    embedding_batch_tokens: int = setting(
        "MLXLAB_EMBEDDING_BATCH_TOKENS", parse_int, 16384,
        "Padded tokens in one forward pass of an embedding model (a longer input runs alone).",
    )  # fmt: skip
    warm_up: str = setting(
        "MLXLAB_WARM_UP", one_of("auto", "on", "off"), "auto",
        "Compile a worker's serving shapes before it is ready; auto: on a GPU only.",
    )  # fmt: skip
    kernel_cache_dir: Path = setting(
        "MLXLAB_KERNEL_CACHE_DIR", Path, under_var("kernels"),
        "GPU kernels MLX compiled, kept across restarts (MLX_PTX_CACHE_DIR wins).",
    )  # fmt: skip
    # Workers on other hosts (docs/DEPLOY.md): started there with `manage.py modelworker
    # --listen tcp://HOST:PORT`, never spawned, evicted or unloaded by this process.
    # A model named at several addresses, or given several local processes (or both), has
    # that many replicas; inference/workers/routing.py sends each request to one.
    workers: dict[str, tuple[str, ...]] = setting(
        "MLXLAB_WORKERS", parse_worker_addresses, {},
        "Models served by workers started elsewhere: NAME=tcp://HOST:PORT,... (a name at "
        "several addresses: a replica at each).",
    )  # fmt: skip
    model_replicas: dict[str, int] = setting(
        "MLXLAB_MODEL_REPLICAS", parse_replica_counts, {},
        "Local worker processes per model: NAME=N,... (1 for a model not named; 0 for one "
        "served by MLXLAB_WORKERS alone, which is the default there).",
    )  # fmt: skip
    replica_routing: str = setting(
        "MLXLAB_REPLICA_ROUTING", one_of("cache", "round_robin"), "cache",
        "How requests spread over a model's replicas: cache (its session, then its cached "
        "prefix, then the least loaded), or round_robin (in turn: to measure against).",
    )  # fmt: skip
    draft_workers: str = setting(
        "MLXLAB_DRAFT_WORKERS", one_of("companion", "inline"), "companion",
        "Where a draft model runs: companion (a worker of its own beside its target's, "
        "which drafts undrafted while it is down), or inline (inside the target's worker).",
    )  # fmt: skip
    replica_imbalance: int = setting(
        "MLXLAB_REPLICA_IMBALANCE", parse_int, 8,
        "A replica holding this many more requests than its model's least loaded one loses "
        "its session and prefix affinity (README.md, Replicas).",
    )  # fmt: skip
    worker_secret: str = setting(
        "MLXLAB_WORKER_SECRET", str.strip, "",
        "The secret the web tier and its TCP workers share (at least 16 characters); "
        "required beyond loopback.",
        secret=True,
    )  # fmt: skip
    worker_link_timeout_seconds: float = setting(
        "MLXLAB_WORKER_LINK_TIMEOUT_SECONDS", parse_float, 6.0,
        "A TCP worker link silent this long is lost (ZMTP heartbeats).",
    )  # fmt: skip

    def __post_init__(self) -> None:
        """What no single row can check: the worker link's secret against its addresses."""
        if self.worker_secret and len(self.worker_secret) < MIN_SECRET_CHARS:
            raise ImproperlyConfigured(
                f"MLXLAB_WORKER_SECRET: at least {MIN_SECRET_CHARS} characters"
            )
        addresses = [a for named in self.workers.values() for a in named]
        open_links = [a for a in addresses if reaches_beyond_loopback(a)]
        if open_links and not self.worker_secret:
            raise ImproperlyConfigured(
                f"MLXLAB_WORKERS: {open_links[0]} is beyond loopback: set MLXLAB_WORKER_SECRET "
                "(the same on the worker), or its link would be open to anyone"
            )
