"""Companion workers: a draft model (speculative decoding) runs in a worker process of its
own (role `companion`) beside its target's (role `primary`), as mlx-bun's workers do,
instead of inside the target's process.

A request that names a draft model gets its primary's companion for that draft (started on
the first such request, and waited for then); the call carries the companion's address,
and the primary's engine asks it for drafts (engine/drafts/companion.py). A companion is
supervised as any worker: its exit, restart and readiness are events, and /engine lists
it. While it is down, its primary's rows go on undrafted; it stops with its model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time

from ..protocol import wire
from .worker import Worker


class Companions:
    """The Supervisor's part that starts companions (it runs on the supervisor's loop)."""

    def companions(self) -> list[Worker]:
        """Every resident model's companions that are not stopped."""
        groups = list(self.models.values())
        return [c for g in groups for c in list(g.companions.values()) if c.state != "stopped"]

    def _drafts_beside(self, worker: Worker, call) -> bool:
        """Whether `call`'s draft model runs in a companion of `worker`."""
        return (
            self.config.companion_command is not None
            and isinstance(call, wire.GenerateCall)
            and bool(call.draft_path)
            and not call.count_only  # counted, not generated: nothing to draft
            and not worker.remote  # a remote worker's host runs its drafts
            and worker.group is not None
        )

    async def _with_companion(self, worker: Worker, call: wire.GenerateCall):
        """`call` with the address of `worker`'s companion for its draft, which is started
        if there is none; a new one is waited for (its first rows draft from the start),
        one that is down is not (the rows go undrafted meanwhile)."""
        key = (worker.id, call.draft_path)
        companion = worker.group.companions.get(key)
        if companion is None:
            companion = self._spawn_companion(worker, call.draft_model or "", call.draft_path)
            await self._first_ready(companion)
        return dataclasses.replace(call, draft_companion=companion.address)

    def _spawn_companion(self, primary: Worker, model: str, path: str) -> Worker:
        worker_id = f"w{next(self._ids)}"
        self.config.socket_dir.mkdir(parents=True, exist_ok=True)
        address = f"ipc://{self.config.socket_dir / f'{os.getpid()}-{worker_id}.sock'}"
        companion = Worker(
            worker_id, model, path, address, 0,
            group=primary.group, role="companion", primary=primary.id,
        )  # fmt: skip
        primary.group.companions[(primary.id, path)] = companion
        self._launch(companion)
        return companion

    async def _first_ready(self, companion: Worker) -> None:
        deadline = time.monotonic() + self.config.load_seconds
        while companion.state == "starting" and companion.restarts == 0:
            try:
                await asyncio.wait_for(companion.changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                return
