"""Django's own middleware, and django-csp's, run as one synchronous block under ASGI.

Each of them is a MiddlewareMixin, which calls its process_request and process_response
through sync_to_async when the stack runs async: a thread switch for each, about a dozen a
request, which cost more of a generation request's web CPU than the view (Django ticket
37177). Declared synchronous only, they run together on the request's own thread after
one switch, and the stack returns to the event loop once for axes' middleware and the
async views below it. The subclasses change nothing else.
"""

from __future__ import annotations

from csp.middleware import CSPMiddleware as _CSP
from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Message
from django.contrib.sessions.middleware import SessionMiddleware as _Session
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptions
from django.middleware.common import CommonMiddleware as _Common
from django.middleware.csrf import CsrfViewMiddleware as _CsrfView
from django.middleware.security import SecurityMiddleware as _Security


def synchronous(middleware: type) -> type:
    """`middleware`, declared synchronous only (Django's documented `async_capable`)."""
    return type(
        middleware.__name__, (middleware,), {"async_capable": False, "__module__": __name__}
    )


SecurityMiddleware = synchronous(_Security)
SessionMiddleware = synchronous(_Session)
CommonMiddleware = synchronous(_Common)
CsrfViewMiddleware = synchronous(_CsrfView)
AuthenticationMiddleware = synchronous(_Authentication)
MessageMiddleware = synchronous(_Message)
XFrameOptionsMiddleware = synchronous(_XFrameOptions)
CSPMiddleware = synchronous(_CSP)
