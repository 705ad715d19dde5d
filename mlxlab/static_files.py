"""The lab's static files over ASGI: Django's handler, with a path that climbs out of the
static folders answered 404 like any missing file.

Django's finders raise SuspiciousFileOperation for `/static/../../etc/passwd`, which its
static handler lets through as a 500 with a traceback in the log for every probe.
"""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404


class StaticFiles(ASGIStaticFilesHandler):
    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousFileOperation:
            raise Http404("no such file") from None
