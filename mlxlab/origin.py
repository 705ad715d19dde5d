"""The websocket Origin check: the page's own origin (scheme, host and port), or a trusted one.

Channels' AllowedHostsOriginValidator compares the host alone, so a page served
on another port of localhost could open /ws/chat/ with the lab's session cookie.
Websockets carry that cookie and no CSRF token, so this check stands in for one.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    return (scheme, parts.hostname or "", port) if parts.hostname else None


def same_origin(origin: str, host: str, secure: bool) -> bool:
    """Whether `origin` (the Origin header) is the origin the socket was opened on."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    sent = urlsplit(origin)
    if sent.scheme not in DEFAULT_PORTS:
        return False
    served = _origin("https" if secure else "http", host)
    return served is not None and _origin(sent.scheme, sent.netloc) == served


class SameOriginValidator:
    """ASGI middleware: deny a websocket whose Origin is not the server's own."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        headers = dict(scope.get("headers", []))
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        secure = scope.get("scheme") in ("wss", "https")
        if origin and host and same_origin(origin, host, secure):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
