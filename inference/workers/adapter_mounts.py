"""Adapters mounted on a model's running workers: an operator's POST and DELETE
/api/models/<name>/adapters (lab/api_adapters.py).

A mount goes to every replica that serves the model; each loads the adapter between two
steps of its batch and answers once it has. The model's replicas remember it: one that
starts later, or restarts after a crash, mounts it again before it takes a request. An
unmount drops it everywhere; requests running under it finish under it, as vLLM's
`/v1/unload_lora_adapter` leaves running requests alone (engine/loop/adapter_set.py).
Both are events on GET /api/events: `adapter_mount`, `adapter_unmount`, one a replica.
"""

from __future__ import annotations

import asyncio
import logging

import zmq

from ..protocol import wire
from ..protocol.adapters import AdapterRef
from .worker import Worker

log = logging.getLogger(__name__)

ADAPTER_SECONDS = 120.0  # a replica's answer to a mount: it reads the adapter's weights


class AdapterRefused(Exception):
    """A mount or unmount that cannot be done, and the HTTP status that says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


class AdapterMounts:
    """The Supervisor's part for mounted adapters (it runs on the supervisor's loop)."""

    # -- called from any thread ----------------------------------------------------------

    def mount_adapter(self, model: str, adapter: AdapterRef) -> dict:
        """Load `adapter` into every running replica of `model` and keep it there.

        Raises AdapterRefused: no running replica (409), an adapter a replica cannot
        apply (400).
        """
        return self.call(self._mount(model, adapter)).result()

    def unmount_adapter(self, model: str, name: str) -> dict:
        """Drop the adapter `name` from `model`'s replicas (those running requests under it
        once they finish: `deferred`). Raises AdapterRefused: none running (409), not
        mounted or loaded there (404)."""
        return self.call(self._unmount(model, name)).result()

    def mounted_adapters(self, model: str) -> list[str]:
        group = self.models.get(model)
        return sorted(group.mounted) if group is not None else []

    # -- the supervisor's loop -----------------------------------------------------------

    async def _mount(self, model: str, adapter: AdapterRef) -> dict:
        group, workers = self._running(model)
        answers = await self._ask_all(workers, wire.AdapterCall("mount", adapter))
        refused = next((a for a in answers if not _state(a)), None)
        if refused is not None:  # all or none: the replicas that took it drop it again
            took = [w for w, a in zip(workers, answers, strict=True) if _state(a)]
            if took and adapter.name not in group.mounted:
                await self._ask_all(took, wire.AdapterCall("unmount", adapter))
            raise AdapterRefused(_why(refused, f"{adapter.name} could not be mounted"), 400)
        group.mounted[adapter.name] = adapter
        for worker, answer in zip(workers, answers, strict=True):
            worker.adapters = answer.mounted
            self.events.emit("adapter_mount", model, worker.id, adapter=adapter.name)
        return {"model": model, "adapter": adapter.name, "mounted": sorted(group.mounted)}

    async def _unmount(self, model: str, name: str) -> dict:
        group, workers = self._running(model)
        answers = await self._ask_all(workers, wire.AdapterCall("unmount", AdapterRef(name, "")))
        mounted = group.mounted.pop(name, None) is not None
        dropped = [(w, a) for w, a in zip(workers, answers, strict=True) if _state(a)]
        if not dropped and not mounted:
            raise AdapterRefused(f"The adapter '{name}' is not mounted on {model}", 404)
        for worker, answer in dropped:
            worker.adapters = answer.mounted
            self.events.emit(
                "adapter_unmount", model, worker.id, adapter=name, deferred=answer.deferred
            )
        deferred = any(answer.deferred for _, answer in dropped)
        state = {"model": model, "adapter": name, "mounted": sorted(group.mounted)}
        return {**state, "deferred": deferred}

    def _running(self, model: str) -> tuple:
        group = self.models.get(model)
        workers = [] if group is None else [w for w in group.workers if _answers(w)]
        if not workers:
            raise AdapterRefused(f"{model} has no running worker: load it first", 409)
        return group, workers

    async def _ask_all(self, workers: list[Worker], call: wire.AdapterCall) -> list:
        async def ask(worker: Worker):
            try:
                return await self._ask(worker, worker.socket, ADAPTER_SECONDS, "adapter", call)
            except (TimeoutError, asyncio.CancelledError, zmq.ZMQError):
                return wire.Rejected(f"the worker {worker.id} did not answer")

        return list(await asyncio.gather(*(ask(worker) for worker in workers)))

    async def _remount(self, worker: Worker, socket) -> None:
        """Mount the model's adapters on a replica that just loaded (a restart, a new
        replica), before it takes requests; one it cannot apply is dropped, and said."""
        worker.adapters = []
        done: set[str] = set()
        while worker.group is not None:  # a mount may arrive meanwhile: until none is new
            todo = [a for a in worker.group.mounted.values() if a.name not in done]
            if not todo:
                return
            for adapter in todo:
                done.add(adapter.name)
                await self._mount_again(worker, socket, adapter)

    async def _mount_again(self, worker: Worker, socket, adapter: AdapterRef) -> None:
        call = wire.AdapterCall("mount", adapter)
        try:
            answer = await self._ask(worker, socket, ADAPTER_SECONDS, "adapter", call)
        except (TimeoutError, zmq.ZMQError) as error:
            answer = wire.Rejected(f"no answer ({type(error).__name__})")
        if isinstance(answer, wire.AdapterState):
            worker.adapters = answer.mounted
            self.events.emit("adapter_mount", worker.model, worker.id, adapter=adapter.name)
            return
        why = _why(answer, "refused")
        log.error("could not mount %s again on %s: %s", adapter.name, worker.id, why)
        worker.group.mounted.pop(adapter.name, None)
        self.events.emit(
            "adapter_unmount", worker.model, worker.id, adapter=adapter.name, reason=why
        )


def _answers(worker: Worker) -> bool:
    return worker.state == "ready" and worker.socket is not None


def _state(answer) -> bool:
    return isinstance(answer, wire.AdapterState)


def _why(answer, fallback: str) -> str:
    return answer.message if isinstance(answer, wire.Rejected) else fallback
