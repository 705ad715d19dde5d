"""Disk writes off the engine thread: one background thread, in order, bounded in bytes.

The engine thread owns MLX and decodes; it must never wait on a disk. What it wants
written (a prompt cache's KV state, a generation's checkpoint) it hands over as a job,
already in its final form: MLX arrays evaluated and contiguous, so the writer thread
only copies bytes and never computes on an array the engine thread made. Jobs run in
the order given, so a checkpoint's later write never lands before an earlier one.

A writer that falls behind drops new jobs past `max_pending_bytes` rather than hold
ever more memory; each job's owner counts what was dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_STOP = object()


class DiskWriter:
    def __init__(self, *, max_pending_bytes: int = 512 << 20, name: str = "disk-writer") -> None:
        self.max_pending_bytes = max_pending_bytes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending_bytes = 0
        self._pending_jobs = 0
        self._idle = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None], nbytes: int = 0) -> bool:
        """Queue `job`; False (and nothing queued) while too many bytes wait already."""
        with self._lock:
            if self._pending_jobs and self._pending_bytes + nbytes > self.max_pending_bytes:
                return False
            self._pending_bytes += nbytes
            self._pending_jobs += 1
        self._queue.put((job, nbytes))
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued job ran; False if `timeout` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending_jobs == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Run what is queued (for up to `timeout`), then stop the thread."""
        self.flush(timeout)
        self._queue.put((_STOP, 0))
        self._thread.join(1.0)

    def _run(self) -> None:
        while True:
            job, nbytes = self._queue.get()
            if job is _STOP:
                return
            try:
                job()
            except Exception:  # a failed write loses that write, never the writer
                log.exception("a background disk write failed")
            finally:
                with self._idle:
                    self._pending_bytes -= nbytes
                    self._pending_jobs -= 1
                    self._idle.notify_all()
