"""Django's ASGI handler, its middleware run as one synchronous chain.

Every Django middleware (and django-csp's) is a MiddlewareMixin, which under an async
chain calls its process_request and process_response through sync_to_async each: about a
dozen thread switches a request, which cost more of a generation request's web CPU than
the view (Django ticket 37177). Here the chain is built synchronous, as under WSGI, and
entered through one sync_to_async: the middleware runs on the request's own thread, and
the async views return to the event loop once, through async_to_sync. The middleware
keeps its canonical names in MIDDLEWARE, which Django's deployment checks look for.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class SynchronousChainHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
