"""The model workers as the web process sees them: one supervisor, started on first use."""

from __future__ import annotations

import atexit
import dataclasses
import sys
import threading

from django.conf import settings

from labsettings import lab_settings

from .accounting import CALLER, Accounting
from .errors import ApiError, model_not_found
from .metrics import RequestMetrics
from .model_registry import amodel_named, model_named
from .models import LanguageModel
from .protocol import wire
from .protocol.adapters import AdapterRef
from .request_ids import REQUEST_ID
from .workers.streams import RequestStream
from .workers.supervisor import Supervisor
from .workers.worker import SupervisorConfig

_supervisor: Supervisor | None = None
_lock = threading.Lock()


def default_model_name() -> str:
    return lab_settings.default_model


def _worker_command(model: str, path: str, address: str) -> list[str]:
    manage = str(settings.BASE_DIR / "manage.py")
    return [
        *(sys.executable, manage, "modelworker", "--model", model, "--path", path),
        *("--listen", address, "--exit-with-parent"),
    ]


def _companion_command(model: str, path: str, address: str) -> list[str]:
    return [*_worker_command(model, path, address), "--companion"]


def supervisor() -> Supervisor:
    """The process's supervisor of model workers (started, with its thread, on first use)."""
    global _supervisor
    with _lock:
        if _supervisor is None:
            _supervisor = Supervisor(
                SupervisorConfig(
                    command=_worker_command,
                    companion_command=(
                        _companion_command if lab_settings.draft_workers == "companion" else None
                    ),
                    socket_dir=lab_settings.worker_socket_dir,
                    max_loaded=lab_settings.max_loaded_models,
                    memory_limit_bytes=lab_settings.model_memory_mb << 20,
                    idle_seconds=lab_settings.model_idle_seconds,
                    wait_seconds=lab_settings.engine_wait_seconds,
                    load_seconds=lab_settings.model_load_seconds,
                    pinned=supervisor_pinned(),
                    remote=dict(lab_settings.workers),
                    replicas=dict(lab_settings.model_replicas),
                    imbalance=lab_settings.replica_imbalance,
                    round_robin=lab_settings.replica_routing == "round_robin",
                    secret=lab_settings.worker_secret,
                    link_timeout=lab_settings.worker_link_timeout_seconds,
                )
            )
            atexit.register(_supervisor.shutdown)
        return _supervisor


async def model_record(name: str | None) -> LanguageModel:
    """The registry entry a request's `model` names (the default when none); 404 if unknown."""
    name = name or default_model_name()
    record = await amodel_named(name)
    if record is None:
        raise model_not_found(name)
    return record


async def open_generation(record: LanguageModel, call) -> RequestStream:
    """Send a call to its model's worker; raises EngineUnavailable if none can take it.

    A generation's figures count from here, so a model's load is part of its first token.
    """
    watchers = [RequestMetrics(record.name)]
    if (caller := CALLER.get()) is not None:
        watchers.append(Accounting(caller, record.name))
    if isinstance(call, wire.GenerateCall):
        call = dataclasses.replace(call, request_id=REQUEST_ID.get())
    try:
        stream = await supervisor().open(
            record.name, record.path, call, size_bytes=record.size_bytes
        )
    except wire.Unencodable as exc:
        raise ApiError(f"the request holds {exc}, which cannot reach the model") from None
    if isinstance(call, wire.GenerateCall) and not call.count_only:
        stream.watchers = tuple(watchers)
    return stream


def load_model_worker(record: LanguageModel) -> None:
    """Make the model resident and wait until its worker is ready (the models page's load)."""
    supervisor().ensure(record.name, record.path, size_bytes=record.size_bytes)


def unload_model_worker(name: str) -> bool:
    return supervisor().unload(name)


def drain_model_worker(name: str) -> bool:
    """Begin draining the model's local workers (they stop once idle); False if none."""
    return supervisor().drain_model(name)


def mount_model_adapter(name: str, adapter: AdapterRef) -> dict:
    """Load the adapter into the model's running workers and keep it (adapter_mounts.py)."""
    return supervisor().mount_adapter(name, adapter)


def unmount_model_adapter(name: str, adapter: str) -> dict:
    return supervisor().unmount_adapter(name, adapter)


def mounted_adapters(name: str) -> list[str]:
    return _supervisor.mounted_adapters(name) if _supervisor is not None else []


def resident_models() -> list[str]:
    return supervisor().ready_models() if _supervisor is not None else []


def replicas_serving(name: str) -> int:
    """How many of the model's replicas take new requests now."""
    if _supervisor is None:
        return 0
    return sum(1 for w in _supervisor.resident() if w.model == name and w.serving)


def model_is_resident(name: str) -> bool:
    """Whether a worker holds the model or is loading it."""
    return _supervisor is not None and any(w.model == name for w in _supervisor.resident())


def supervisor_pinned() -> frozenset[str]:
    """The models kept loaded whatever the memory pressure."""
    return frozenset({default_model_name()})


def preload_default_in_background() -> None:
    """Start the default model's worker so the first request does not pay for the load."""

    def warm() -> None:
        record = model_named(default_model_name())
        if record is None:
            return
        supervisor().ensure(record.name, record.path, size_bytes=record.size_bytes, wait=False)

    threading.Thread(target=warm, name="preload-default-model", daemon=True).start()
