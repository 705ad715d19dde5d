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


class SecurityMiddleware(_Security):
    async_capable = False


class SessionMiddleware(_Session):
    async_capable = False


class CommonMiddleware(_Common):
    async_capable = False


class CsrfViewMiddleware(_CsrfView):
    async_capable = False


class AuthenticationMiddleware(_Authentication):
    async_capable = False


class MessageMiddleware(_Message):
    async_capable = False


class XFrameOptionsMiddleware(_XFrameOptions):
    async_capable = False


class CSPMiddleware(_CSP):
    async_capable = False
