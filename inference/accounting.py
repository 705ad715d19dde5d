"""What each generation costs its caller: the usage record and the tokens-per-minute limit.

The API views' decorator (api/endpoints.py) names the caller for the request in `CALLER`;
`open_generation` gives each generation an `Accounting` watcher, which records the
tally once the worker gives it: at the end, or after the client left (what was generated
until then counts).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging

from asgiref.sync import sync_to_async

from access.callers import Caller, rate_limiter
from access.usage import record_usage

from .protocol.events import Event, Finished

log = logging.getLogger(__name__)

CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)
_pending: set[asyncio.Task] = set()  # held until done: the loop keeps only weak references


class Accounting:
    """A RequestStream watcher: records the caller's usage of `model` from the tally."""

    def __init__(self, caller: Caller, model: str) -> None:
        self.caller = caller
        self.model = model

    def event(self, event: Event) -> None:
        if isinstance(event, Finished):
            self._record(event)

    def abandoned(self) -> None:
        pass  # the worker's tally follows (settled)

    def settled(self, tally: Finished) -> None:
        self._record(tally)

    def _record(self, tally: Finished) -> None:
        task = asyncio.get_running_loop().create_task(self._store(tally))
        _pending.add(task)
        task.add_done_callback(_pending.discard)

    async def _store(self, tally: Finished) -> None:
        caller = self.caller
        try:
            await sync_to_async(record_usage)(
                caller, self.model, tally.prompt_tokens, tally.completion_tokens,
                tally.cached_tokens,
            )  # fmt: skip
            tokens = tally.prompt_tokens + tally.completion_tokens
            await rate_limiter().spend(caller.name, caller.rates, tokens)
        except Exception:  # the answer is out: a lost record is logged, never raised
            log.exception("could not record the usage of %s", caller.name)


async def settle_accounts() -> None:
    """Wait for the records under way (a test's or a shutdown's way to see them all)."""
    if _pending:
        await asyncio.gather(*list(_pending), return_exceptions=True)
