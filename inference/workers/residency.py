"""Which models stay resident: the supervisor's eviction, draining and idle unloading.

At most `max_loaded` models (and `memory_limit_bytes` of their reported memory) are
resident, least recently used evicted first, pinned models never; an evicted worker
drains (finishes what it holds) before it stops. A remote worker (remote.py) holds no
memory here: it is never counted, evicted or unloaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from .worker import Worker

log = logging.getLogger(__name__)


class Residency:
    """The Supervisor's part that loads, evicts and stops workers (on the supervisor's loop)."""

    async def _resident_worker(self, model: str, path: str, size_bytes: int) -> Worker:
        """The model's current worker, or a new one; a draining one's successor."""
        while True:
            worker = self.workers.get(model)
            if worker is not None and worker.draining:
                await worker.changed.wait()
                continue
            if worker is not None and worker.state != "stopped":
                if worker.path == path or worker.remote:
                    return worker
                # The registry moved the model to a new folder (a pull brought a newer
                # commit): the old worker finishes what it holds, a new one loads that.
                log.info("reloading %s from %s", model, path)
                worker.draining = True  # a second request waits for the same drain
                self.loop.create_task(self._drain_and_stop(worker))
                await worker.changed.wait()
                continue
            async with self._residency:
                worker = self.workers.get(model)
                if worker is None or worker.state == "stopped":
                    if model in self.config.remote:
                        return self._attach(model, path, size_bytes)
                    await self._make_room(model, size_bytes)
                    return self._spawn(model, path, size_bytes)

    async def _make_room(self, model: str, size_bytes: int) -> None:
        """Evict least recently used workers until the new one fits (pinned ones stay)."""
        while True:
            # A remote worker holds no memory here: it never counts, and is never evicted.
            others = [w for w in self.resident() if w.model != model and not w.remote]
            over_count = len(others) + 1 > max(self.config.max_loaded, 1)
            limit = self.config.memory_limit_bytes
            used = sum(w.memory_bytes for w in others)
            over_memory = limit > 0 and used + size_bytes > limit and bool(others)
            if not (over_count or over_memory):
                return
            candidates = sorted(
                (w for w in others if w.model not in self.config.pinned),
                key=lambda w: w.last_used,
            )
            if not candidates:
                log.warning("no room for %s: every resident model is pinned", model)
                return
            victim = candidates[0]
            log.info("unloading %s to make room for %s", victim.model, model)
            await self._drain_and_stop(victim)

    async def _drain_and_stop(self, worker: Worker) -> None:
        worker.draining = True
        worker.notify()
        while (worker.streams or worker.waiters) and worker.state != "stopped":
            await worker.changed.wait()
        await self._stop(worker)

    async def _stop(self, worker: Worker, timeout: float = 10.0) -> None:
        worker.state = "stopped"
        worker.draining = False
        if self.workers.get(worker.model) is worker:
            self.workers.pop(worker.model)
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
        worker = self.workers.get(model)
        if worker is None or worker.remote:  # a remote worker is its own host's to stop
            return False
        await self._drain_and_stop(worker)
        return True

    async def _housekeeping(self) -> None:
        """Refresh the workers' memory reports; unload models idle past their time."""
        while True:
            await asyncio.sleep(self.config.report_interval)
            for worker in self.resident():
                if worker.state == "ready":
                    self.loop.create_task(self._live_status(worker.model, 5.0))
                idle = time.monotonic() - worker.last_used
                if (
                    self.config.idle_seconds > 0
                    and idle > self.config.idle_seconds
                    and worker.state == "ready"
                    and not worker.streams
                    and not worker.waiters
                    and not worker.draining
                    and worker.model not in self.config.pinned
                    and not worker.remote
                ):
                    log.info("unloading %s: idle for %.0f s", worker.model, idle)
                    self.loop.create_task(self._drain_and_stop(worker))

    async def _stop_all(self, timeout: float) -> None:
        await asyncio.gather(*(self._stop(w, timeout) for w in self.resident()))
