"""Body limits and clocks at the HTTP server, as the bytes arrive (issue 56).

Twisted parses a request for Daphne and spools its whole body before Daphne hands it to
the ASGI application, so a limit checked there (inference/body_limits.py's guard) comes
after the bytes were taken. These subclasses hook Twisted's own steps instead:

- `LimitedChannel.lineReceived` keeps the request line's target, so that the body limit
  of its routed path is known when the headers end;
- `LimitedRequest.gotLength` (Twisted calls it once the headers are parsed) answers a
  declared Content-Length over the limit with its 413 before any of the body is read,
  and closes the connection;
- `LimitedRequest.handleContentChunk` (once per piece of body) counts the bytes: a chunked
  body is cut off with its 413 as soon as it passes the limit, nothing past it spooled;
- two clocks per connection: the request line and headers must arrive within
  MLXLAB_REQUEST_HEADER_SECONDS of the connection's start or of its previous answer (a
  slowloris client is dropped, an idle keep-alive connection closed), and the body within
  MLXLAB_REQUEST_BODY_SECONDS of the headers (a 408).

An answer here goes out before Twisted knows the request's method and version, when its
Request cannot write yet: it is written whole, with Connection: close, as Twisted's own
400 for a malformed request is. mlxlab/httpserver.py puts these classes under Daphne.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from daphne.http_protocol import WebRequest
from django.http import HttpResponse
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure
from twisted.web import http

from inference.body_limits import (
    body_limit,
    body_timeout_response,
    route_view,
    routed_path,
    too_large_response,
)
from labsettings import lab_settings


def http_bytes(response: HttpResponse) -> bytes:
    """`response` as a whole HTTP/1.1 message that ends the connection."""
    content = response.content
    lines = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
    lines += [f"{name}: {value}" for name, value in response.items()]
    lines += [f"Content-Length: {len(content)}", "Connection: close"]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + content


def headers_late_response(seconds: float) -> HttpResponse:
    # Plain text: the request's route, and so its error shape, may not be known yet.
    message = f"The request's headers did not arrive within {seconds:g} seconds."
    return HttpResponse(message, status=408, content_type="text/plain; charset=utf-8")


class LimitedChannel(http.HTTPChannel):
    """One connection: its request line's target, its clocks, and refusals that close it."""

    request_method = b""
    request_target = b"/"
    refused = False  # answered here: what else arrives is neither read on nor dispatched
    _deadline: IDelayedCall | None = None
    _abort: IDelayedCall | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        self._await_headers()

    def lineReceived(self, line: bytes) -> None:
        waiting = len(self.requests)
        super().lineReceived(line)
        if len(self.requests) > waiting:  # Twisted made a request of this line
            parts = line.split()
            if len(parts) == 3:  # otherwise Twisted answered 400 and closes
                self.request_method, self.request_target = parts[0], parts[1]

    def allHeadersReceived(self) -> None:
        self._stop_clock()
        super().allHeadersReceived()  # calls the request's gotLength, which may refuse it
        if not self.refused and self.length != 0:
            seconds = lab_settings.request_body_seconds
            self._start_clock(seconds, lambda: self._body_late(seconds))

    def allContentReceived(self) -> None:
        self._stop_clock()
        if not self.refused:  # a refused body's last chunk must not start the application
            super().allContentReceived()

    def requestDone(self, request: http.Request) -> None:
        # Before Twisted's: it may parse a pipelined request at once, whose headers end
        # this clock.
        if self.persistent:
            self._await_headers()
        super().requestDone(request)

    def connectionLost(self, reason: Failure) -> None:
        self._stop_clock()
        if self._abort is not None and self._abort.active():
            self._abort.cancel()
        super().connectionLost(reason)

    def refuse(self, response: HttpResponse) -> None:
        """Answer `response` and close the connection, reading nothing more of it."""
        if self.refused:
            return
        self.refused = True
        self._stop_clock()
        self.transport.write(http_bytes(response))
        self._log(response)
        self._close()

    def _close(self) -> None:
        self.refused = True
        self.loseConnection()  # stops reading at once; closes once the answer is written
        # As Twisted's own timeout does: a peer that never reads the answer cannot keep
        # the socket open either.
        self._abort = self.callLater(self.abortTimeout, self.transport.abortConnection)

    def _await_headers(self) -> None:
        seconds = lab_settings.request_header_seconds
        self._start_clock(seconds, lambda: self._headers_late(seconds))

    def _start_clock(self, seconds: float, then: Callable[[], None]) -> None:
        self._stop_clock()
        if seconds > 0:
            self._deadline = self.callLater(seconds, then)

    def _stop_clock(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _headers_late(self, seconds: float) -> None:
        self._deadline = None
        if self.requests:  # a request began: say why it ends
            self.refuse(headers_late_response(seconds))
        else:  # an idle connection: nothing to answer
            self._close()

    def _body_late(self, seconds: float) -> None:
        self._deadline = None
        request = self.requests[-1]
        self.refuse(body_timeout_response(request.route, route_view(request.route), seconds))

    def _log(self, response: HttpResponse) -> None:
        """An access log line, as Daphne writes one for each answer."""
        peer = self.transport.getPeer()
        self.factory.server.log_action(
            "http",
            "complete",
            {
                "path": self.request_target.decode("ascii", "replace"),
                "status": response.status_code,
                "method": self.request_method.decode("ascii", "replace"),
                "client": f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}",
                "time_taken": 0,
                "size": len(response.content),
            },
        )


class LimitedRequest(WebRequest):
    """Daphne's request, its body held to its route's limit as it arrives."""

    channel: LimitedChannel
    route = "/"  # the path Django will route on
    limit = 0
    received = 0

    def __init__(self, *args, **kwargs) -> None:
        # Twisted would parse every POST's Content-Type through the email package (half a
        # millisecond of the web's CPU a generation request), and a form or multipart
        # body into request.args, a second copy of an upload; Daphne reads neither, it
        # hands the body as it came to Django, which parses what a view asks for.
        super().__init__(*args, parsePOSTFormSubmission=False, **kwargs)

    def gotLength(self, length: int | None) -> None:
        """Called once the headers are parsed, before any of the body is read."""
        self.route = self._routed_path()
        self.limit = body_limit(self.route)
        if length is not None and length > self.limit:
            # No "100 Continue" after the 413 (Twisted sends one after this returns).
            self.requestHeaders.removeHeader(b"Expect")
            self._refuse_too_large(length)
            return  # no content file: nothing of this body is kept
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        if self.channel is None or self.channel.refused:
            return
        self.received += len(data)
        if self.received > self.limit:
            self._refuse_too_large(self.received)
            return
        super().handleContentChunk(data)

    def _refuse_too_large(self, size: int) -> None:
        view = route_view(self.route)
        self.channel.refuse(too_large_response(self.route, view, size, self.limit))

    def _routed_path(self) -> str:
        """The path as Daphne will give it to Django: unquoted, less the root path (the
        server's, or a Daphne-Root-Path header's, the last one winning as in Daphne)."""
        target = self.channel.request_target.split(b"?", 1)[0]
        path = unquote(target.decode("ascii", "replace"))
        root = self.server.root_path
        for value in self.requestHeaders.getRawHeaders(b"Daphne-Root-Path") or []:
            root = unquote(value.decode("ascii", "replace"))
        return routed_path(path, root)
