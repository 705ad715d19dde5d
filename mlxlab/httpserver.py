"""The lab's web server: Daphne, its HTTP connections held to the lab's limits.

`python -m mlxlab.httpserver` takes Daphne's own arguments (`-b HOST -p PORT
mlxlab.asgi:application`, `--proxy-headers`, ...) and runs Daphne's server, websockets
and all, with one change: each HTTP connection is a LimitedChannel and each request a
LimitedRequest (http_limits.py), which refuse an oversized or late body as it arrives
rather than after Daphne has spooled it. runlab, the tests and the benchmarks start this.

HTTP/2 is not offered: Twisted's HTTP/2 connection (with TLS only, which the lab leaves
to a proxy) would bypass these classes.
"""

from __future__ import annotations

import os

# daphne.cli imports daphne.server, which must install Twisted's asyncio reactor before
# anything imports twisted.internet.reactor: these imports come first.
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory
from daphne.server import Server

from labsettings import LabSettings

from .http_limits import LimitedChannel, LimitedRequest


class LimitedHTTPFactory(HTTPFactory):
    """Daphne's factory, building LimitedChannel connections of LimitedRequests."""

    protocol = LimitedChannel

    def buildProtocol(self, addr):
        channel = super().buildProtocol(addr)
        channel.requestFactory = LimitedRequest
        return channel

    def acceptableProtocols(self) -> list[bytes]:
        return [b"http/1.1"]


class LimitedServer(Server):
    """Daphne's server with LimitedHTTPFactory.

    Server.run() builds its HTTPFactory and listens with it in the same breath, with no
    parameter for the class. Its one seam is the attribute it stores the factory in: this
    property builds ours in its place, so run() is Daphne's own, not a copy.
    """

    @property
    def http_factory(self) -> LimitedHTTPFactory:
        return self._limited_factory

    @http_factory.setter
    def http_factory(self, daphnes: HTTPFactory) -> None:
        self._limited_factory = LimitedHTTPFactory(self)


class LabCommandLine(CommandLineInterface):
    """Daphne's command line, running LimitedServer."""

    description = "MLX Lab's HTTP/WebSocket server (Daphne, with body limits and clocks)"
    server_class = LimitedServer

    def __init__(self) -> None:
        super().__init__()
        # A chat page's message may carry images (docs/LAB_UI.md, "Images"): it is held to
        # an API body's bound, MLXLAB_MAX_REQUEST_BYTES, not Daphne's 1 MiB default.
        limit = LabSettings.from_environ(os.environ).max_request_bytes
        self.parser.set_defaults(websocket_max_message_size=limit, websocket_max_frame_size=limit)


if __name__ == "__main__":
    LabCommandLine.entrypoint()
