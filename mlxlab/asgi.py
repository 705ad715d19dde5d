"""ASGI entry point: Django over HTTP, the lab's websockets through Channels."""

import gc
import os

import django
from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application() does

from mlxlab.asgi_handler import SynchronousChainHandler  # noqa: E402

django_application = SynchronousChainHandler()

from inference.body_limits import BodyLimitGuard  # noqa: E402
from inference.engines import preload_default_in_background  # noqa: E402
from inference.request_ids import RequestIds  # noqa: E402
from jobs.routing import websocket_urlpatterns as job_sockets  # noqa: E402
from jobs.watchdog import start_watchdog  # noqa: E402
from lab.routing import websocket_urlpatterns as chat_sockets  # noqa: E402
from labsettings import lab_settings  # noqa: E402
from mlxlab.origin import SameOriginValidator  # noqa: E402
from mlxlab.static_files import StaticFiles  # noqa: E402

# Daphne serves no files: the lab's static assets (and the API docs page's, from
# drf-spectacular-sidecar, as no CDN may be reached) come from Django's finders.
# Websockets carry the session cookie, not a CSRF token: the Origin check (origin.py)
# stands in for it.
application = ProtocolTypeRouter(
    {
        "http": RequestIds(BodyLimitGuard(StaticFiles(django_application))),
        "websocket": SameOriginValidator(
            AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter([*chat_sockets, *job_sockets]))
            )
        ),
    }
)

if lab_settings.preload_default_model:
    preload_default_in_background()
if lab_settings.job_watchdog_in_web:
    # A job whose whole Celery worker died is failed even while no worker runs.
    start_watchdog("web")

# What the process imported lives as long as it does: frozen, the cyclic collector's
# full passes no longer walk it (they took about 7 ms of each request's CPU). The URL
# patterns first, so that every view module is in.
get_resolver().url_patterns  # noqa: B018 (imports every view module)
gc.collect()
gc.freeze()
