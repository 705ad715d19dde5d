"""Django's ASGI handler, its middleware run as one synchronous chain on kept threads.

Every Django middleware (and django-csp's) is a MiddlewareMixin, which under an async
chain calls its process_request and process_response through sync_to_async each: about a
dozen thread switches a request, which cost more of a generation request's web CPU than
the view (Django ticket 37177). Here the chain is built synchronous, as under WSGI, and
entered through one sync_to_async: the middleware runs on the request's own thread, and
the async views return to the event loop once, through async_to_sync. The middleware
keeps its canonical names in MIDDLEWARE, which Django's deployment checks look for.

Django gives each request a new thread (a ThreadSensitiveContext of its own), and so a
new database connection, closed with the request: a fifth of a short request's web CPU
went to starting the thread and opening the connection. Here a request borrows a kept
thread, one request at a time on each as a WSGI server's pool does, and its connection
stays open between requests (CONN_MAX_AGE); Django's request signals still close one
that is broken or too old.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.http import HttpRequest, HttpResponseBase

# Threads kept idle past a burst, each with its connection: a PostgreSQL server's
# connection slots are the bound (100 by default), shared with Celery and other hosts.
KEPT_THREADS = 16


class SynchronousChainHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self._threads = KeptThreads(KEPT_THREADS)

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's refusal
        thread = self._threads.take()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self._threads.give_back(thread)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


class RequestThread(ThreadPoolExecutor):
    """One thread, and how many calls it has yet to finish."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request")
        self.unfinished = 0  # changed on the loop's thread (submit) and this one (done)
        self._count = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        with self._count:
            self.unfinished += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future) -> None:
        with self._count:
            self.unfinished -= 1


class KeptThreads:
    """Threads lent to one request at a time, up to `keep` of them kept idle."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._idle: list[RequestThread] = []
        self._lock = threading.Lock()

    def take(self) -> RequestThread:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return RequestThread()

    def give_back(self, thread: RequestThread) -> None:
        # A request cut short (a client gone, a cancelled task) may leave its chain running
        # on the thread: the next request would wait behind it, so that thread ends instead.
        with self._lock:
            if thread.unfinished == 0 and len(self._idle) < self._keep:
                self._idle.append(thread)
                return
        thread.submit(connections.close_all)  # on its own thread, once its work is done
        thread.shutdown(wait=False)
