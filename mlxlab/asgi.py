"""ASGI entry point: Django over HTTP; websockets join here as the lab grows."""

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlxlab.settings")

django_application = get_asgi_application()

from django.conf import settings  # noqa: E402  (after Django is set up)

from inference.engines import preload_default_in_background  # noqa: E402

application = ProtocolTypeRouter({"http": django_application})

if settings.MLXLAB["PRELOAD_DEFAULT_MODEL"]:
    preload_default_in_background()
