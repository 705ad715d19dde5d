"""Which models stay resident: the supervisor's eviction, draining and idle unloading.

A model is resident with all its replicas (residency counts each local worker process):
at most `max_loaded` processes (and `memory_limit_bytes` of their reported memory) are
resident, the least recently used model evicted first, pinned models never; an evicted
model's replicas drain (finish what they hold) before they stop. A remote worker
(remote.py) holds no memory here: it is never counted, evicted or unloaded. One replica
can also be drained alone (a rolling restart): it finishes its streams while the others
take the new requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from .routing import Router
from .worker import Replicas, Worker

log = logging.getLogger(__name__)
DRAIN_STOP_SECONDS = 10.0  # a drained worker that ignores SIGTERM this long is killed


class Residency:
    """The Supervisor's part that loads, evicts and stops workers (on the supervisor's loop)."""

    async def _resident_replicas(self, model: str, path: str, size_bytes: int) -> Replicas:
        """The model's current replicas, or new ones; a draining model's successors."""
        while True:
            group = self.models.get(model)
            if group is not None and group.draining:
                await group.changed.wait()
                continue
            if group is not None:
                if group.path == path or not group.local:
                    return group
                # The registry moved the model to a new folder (a pull brought a newer
                # commit): the old workers finish what they hold, new ones load that.
                log.info("reloading %s from %s", model, path)
                group.draining = True  # a second request waits for the same drain
                self.loop.create_task(self._drain_and_stop(group))
                await group.changed.wait()
                continue
            async with self._residency:
                group = self.models.get(model)
                if group is None:
                    return await self._load(model, path, size_bytes)

    async def _load(self, model: str, path: str, size_bytes: int) -> Replicas:
        local = self.config.local_replicas(model)
        if local:
            await self._make_room(model, size_bytes, local)
        group = Replicas(model, path, Router(self.config.imbalance, self.config.round_robin))
        self.models[model] = group
        replicas = local + len(self.config.addresses(model))
        self.events.emit("load", model, model, path=path, replicas=replicas)
        for replica in range(local):
            self._spawn(group, replica, size_bytes)
        for offset, address in enumerate(self.config.addresses(model)):
            self._attach(group, local + offset, address, size_bytes)
        return group

    async def _make_room(self, model: str, size_bytes: int, count: int) -> None:
        """Evict least recently used models until `count` new processes fit (pinned stay)."""
        while True:
            others = [g for g in self.models.values() if g.model != model and not g.stopped]
            # A remote worker holds no memory here: it never counts, and is never evicted.
            processes = [w for g in others for w in g.local if w.state != "stopped"]
            over_count = len(processes) + count > max(self.config.max_loaded, count)
            limit = self.config.memory_limit_bytes
            used = sum(w.memory_bytes for w in processes)
            over_memory = limit > 0 and used + size_bytes * count > limit and bool(processes)
            if not (over_count or over_memory):
                return
            candidates = sorted(
                (g for g in others if g.local and g.model not in self.config.pinned),
                key=lambda g: g.last_used,
            )
            if not candidates:
                log.warning("no room for %s: every resident model is pinned", model)
                return
            victim = candidates[0]
            log.info("unloading %s to make room for %s", victim.model, model)
            self.events.emit("evict", victim.model, victim.model, to_load=model)
            await self._drain_and_stop(victim)

    async def _drain_and_stop(self, group: Replicas) -> None:
        group.draining = True
        group.notify()
        for worker in group.local:
            self.events.emit("draining", group.model, worker.id)
        while group.holds_requests() and group.live() and not group.stopped:
            await group.changed.wait()
        await self._stop_group(group)

    async def _stop_group(self, group: Replicas, timeout: float = 10.0) -> None:
        if group.stopped:
            return
        group.stopped = True
        group.draining = False
        if self.models.get(group.model) is group:
            self.models.pop(group.model)
        workers = [*group.workers, *group.companions.values()]
        await asyncio.gather(*(self._stop(w, timeout) for w in workers))
        group.notify()

    async def _stop(self, worker: Worker, timeout: float = 10.0) -> None:
        if worker.state == "stopped" and worker.process is None and worker.socket is None:
            return
        worker.state = "stopped"
        worker.drained = False
        process = worker.process
        if process is not None:
            process.terminate()
            deadline = time.monotonic() + timeout
            while process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if process.poll() is None:
                process.kill()
        self._close_socket(worker, worker.last_exit)
        if worker.socket_path:
            Path(worker.socket_path).unlink(missing_ok=True)
        worker.notify()
        if not self._closed:  # at exit, the log's stream may be closed already
            log.info("stopped worker %s for %s", worker.id, worker.model)

    async def _unload(self, model: str) -> bool:
        group = self.models.get(model)
        if group is None or not group.local:  # a remote worker is its own host's to stop
            return False
        self.events.emit("unload", model, model, reason="asked")
        await self._drain_and_stop(group)
        return True

    async def _begin_unload(self, model: str) -> bool:
        """`_unload` without waiting for its end (an operator's drain)."""
        group = self.models.get(model)
        if group is None or not group.local or group.draining:
            return group is not None and group.draining
        self.loop.create_task(self._unload(model))
        await asyncio.sleep(0)  # the drain starts: /engine says "draining" from here on
        return True

    async def _drain_replica(self, worker_id: str) -> bool:
        """One replica out of rotation until its streams end; then a local one restarts
        (`_exited` relaunches it at once) and a remote one waits for its host's restart
        (remote.py puts it back when its link is lost and answers again)."""
        worker = next((w for w in self.resident() if w.id == worker_id), None)
        if worker is None:
            return False
        worker.drained = True
        worker.notify()
        self.events.emit("draining", worker.model, worker.id, replica=worker.replica)
        self.loop.create_task(self._finish_drain(worker))
        return True

    async def _undrain_replica(self, worker_id: str) -> bool:
        """A drained replica back in rotation at once: a remote one whose host is not to be
        restarted after all, or a local one whose drain has not ended (it keeps its
        process). False when no replica has that id."""
        worker = next((w for w in self.resident() if w.id == worker_id), None)
        if worker is None:
            return False
        if worker.drained:
            worker.drained = False
            worker.notify()  # _finish_drain sees it and leaves the process be
            if worker.state == "ready":
                self.events.emit("ready", worker.model, worker.id, replica=worker.replica)
        return True

    async def _finish_drain(self, worker: Worker) -> None:
        while worker.streams and worker.state == "ready" and worker.drained:
            await worker.changed.wait()
        if not worker.drained:  # it died meanwhile: its restart ended the drain
            return
        if worker.state != "ready":  # loading or stopped: its next process is a fresh one
            worker.drained = False
            worker.notify()
            return
        log.info("drained worker %s for %s", worker.id, worker.model)
        if worker.remote or worker.process is None:
            return
        worker.state = "restarting"
        worker.notify()
        process = worker.process
        process.terminate()
        self.loop.call_later(DRAIN_STOP_SECONDS, lambda: process.poll() is None and process.kill())

    async def _housekeeping(self) -> None:
        """Refresh the workers' memory reports; unload models idle past their time."""
        while True:
            await asyncio.sleep(self.config.report_interval)
            for worker in [*self.resident(), *self.companions()]:
                if worker.state == "ready":
                    self.loop.create_task(self._live_status(worker, 5.0))
            for group in list(self.models.values()):
                idle = time.monotonic() - group.last_used
                if (
                    self.config.idle_seconds > 0
                    and idle > self.config.idle_seconds
                    and any(w.state == "ready" for w in group.local)
                    and not group.holds_requests()
                    and not group.draining
                    and group.model not in self.config.pinned
                ):
                    log.info("unloading %s: idle for %.0f s", group.model, idle)
                    self.events.emit("unload", group.model, group.model, reason="idle")
                    self.loop.create_task(self._drain_and_stop(group))

    async def _stop_all(self, timeout: float) -> None:
        await asyncio.gather(*(self._stop_group(g, timeout) for g in list(self.models.values())))
