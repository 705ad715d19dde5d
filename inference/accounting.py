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
        self.record(tally.prompt_tokens, tally.completion_tokens, tally.cached_tokens)

    def record(self, prompt: int, completion: int = 0, cached: int = 0) -> None:
        """Record one request's tokens, in the background of the caller's loop.

        In a context of its own: the record may outlive the view, and in the request's
        context its ORM call would go to the request's thread, whose executor has quit
        once the view returned (the synchronous middleware chain, mlxlab/asgi_handler.py).
        """
        store = self._store(prompt, completion, cached)
        task = asyncio.get_running_loop().create_task(store, context=contextvars.Context())
        _pending.add(task)
        task.add_done_callback(_pending.discard)

    async def _store(self, prompt: int, completion: int, cached: int) -> None:
        caller = self.caller
        try:
            await sync_to_async(record_usage)(caller, self.model, prompt, completion, cached)
            await rate_limiter().spend(caller.name, caller.rates, prompt + completion)
        except Exception:  # the answer is out: a lost record is logged, never raised
            log.exception("could not record the usage of %s", caller.name)


def account_for_input(model: str, tokens: int) -> None:
    """A call that generates nothing (embeddings, rerank): its input tokens, counted as a
    generation's prompt is, for the caller the API's decorator named."""
    if (caller := CALLER.get()) is not None:
        Accounting(caller, model).record(tokens)


async def settle_accounts() -> None:
    """Wait for the records under way (a test's or a shutdown's way to see them all)."""
    if _pending:
        await asyncio.gather(*list(_pending), return_exceptions=True)
