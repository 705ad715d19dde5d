"""The middleware stack switches threads once per request, not once per middleware."""

from __future__ import annotations

from django.conf import settings
from django.utils.deprecation import MiddlewareMixin
from django.utils.module_loading import import_string


def test_no_middleware_calls_its_hooks_through_a_thread_switch_of_its_own():
    # A MiddlewareMixin left async-capable runs process_request and process_response
    # through sync_to_async each (two thread switches apiece under ASGI); declared
    # synchronous, the block of them runs after one switch (mlxlab/middleware.py).
    switching = [
        path
        for path in settings.MIDDLEWARE
        if issubclass(cls := import_string(path), MiddlewareMixin)
        and getattr(cls, "async_capable", False)
        and (hasattr(cls, "process_request") or hasattr(cls, "process_response"))
    ]
    assert switching == []
