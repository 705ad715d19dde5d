"""Image URLs, fetched by the web process within bounds, since fetching is its risk.

A surface's parser keeps an http(s) image as a remote part (its URL and the parameter
that named it); plan_generation, once the model is known to take images, fetches every
one (`fetch_remote_images`). Each fetch, redirects included, ends within
MLXLAB_MEDIA_FETCH_SECONDS, reads at most MLXLAB_MAX_IMAGE_BYTES, takes only the image
types served, and connects only to the address it checked: the host is resolved once,
its addresses judged (addresses.py), and the connection made to the checked address with
the name kept in the Host header and TLS's SNI, so a second lookup cannot rebind it.
No error repeats the URL: its user info or query may hold a secret.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from dataclasses import dataclass

import httpx2

from labsettings import lab_settings

from ..errors import ApiError
from ..protocol.media import IMAGE, media_parts
from .addresses import is_allowed, parse_address
from .images import MIME_TYPES, checked_image

MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)
DEFAULT_PORTS = {"http": 80, "https": 443}
# A body of no declared type is sniffed like any other; one of another type is refused.
UNTYPED = ("", "application/octet-stream")
HEADERS = {
    "Accept": ", ".join(MIME_TYPES),
    # A compressed body could inflate past the byte bound inside one chunk.
    "Accept-Encoding": "identity",
    "User-Agent": "mlxlab-image-fetch",
}


def remote_image(url: str, *, param: str) -> dict:
    """The part of an image still at its URL: checked for form now, fetched in planning."""
    target(url, param=param, hop=0)
    return {"type": IMAGE, "url": url, "param": param}


@dataclass(frozen=True)
class Target:
    """One hop's URL, and what its request needs: the name and port to resolve."""

    url: httpx2.URL

    @property
    def host(self) -> str:
        return self.url.raw_host.decode("ascii")

    @property
    def port(self) -> int:
        return self.url.port or DEFAULT_PORTS[self.url.scheme]

    def request(self, address: str) -> tuple[httpx2.URL, dict, dict]:
        """(URL, headers, extensions) of a request to `address` that names the host."""
        headers = {**HEADERS, "Host": self.url.netloc.decode("ascii")}
        return self.url.copy_with(host=address), headers, {"sni_hostname": self.host}


def _where(hop: int) -> str:
    return "the image URL" if hop == 0 else "the image URL's redirect"


def target(url: str, *, param: str, hop: int) -> Target:
    """An http(s) URL with a host and no credentials; a 400 otherwise."""
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError):
        raise ApiError(f"{param}: {_where(hop)} is not a valid URL", param=param) from None
    if parsed.scheme not in DEFAULT_PORTS or not parsed.raw_host:
        raise ApiError(f"{param}: {_where(hop)} must be an http(s) URL with a host", param=param)
    if parsed.userinfo:
        raise ApiError(
            f"{param}: {_where(hop)} carries a user name or password, which is not sent",
            param=param,
        )
    return Target(parsed)


async def fetch_remote_images(messages: list[dict]) -> list[dict]:
    """The messages with every remote image fetched and checked, after the count of
    images is checked against MLXLAB_MAX_IMAGES (before any is fetched)."""
    images = [part for part in media_parts(messages) if part["type"] == IMAGE]
    limit = lab_settings.max_images
    if len(images) > limit:
        raise ApiError(
            f"messages: a request may hold at most {limit} images on this server; "
            f"this one holds {len(images)}",
            param="messages",
        )
    if not any(map(_is_remote_part, images)):
        return messages
    return [await _fetched_message(message) for message in messages]


async def _fetched_message(message: dict) -> dict:
    content = message.get("content")
    if not isinstance(content, list) or not any(map(_is_remote_part, content)):
        return message
    parts = [await _fetched(part) if _is_remote_part(part) else part for part in content]
    return {**message, "content": parts}


def _is_remote_part(part: dict) -> bool:
    return part.get("type") == IMAGE and "url" in part


async def _fetched(part: dict) -> dict:
    data = await fetch_image(part["url"], param=part["param"])
    # Decoding the header is CPU work: off the event loop, as is the body's JSON.
    return await asyncio.to_thread(checked_image, data, param=part["param"])


async def fetch_image(url: str, *, param: str) -> bytes:
    """The bytes at an image URL, within every bound; a 400 naming `param` otherwise."""
    seconds = lab_settings.media_fetch_seconds
    try:
        async with asyncio.timeout(seconds):
            return await _follow(url, param)
    except TimeoutError:
        raise ApiError(
            f"{param}: the image was not fetched within this server's {seconds:g} seconds",
            param=param,
        ) from None


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle takes milliseconds: once, not per fetch.
    return httpx2.create_ssl_context()


async def _follow(url: str, param: str) -> bytes:
    tls = await asyncio.to_thread(_tls_context)
    # No connection is kept: one made (and its certificate checked) for one host's name
    # must not carry a redirect's request for another name at the same address. No proxy
    # from the environment either: it would connect in our stead, to the name.
    no_reuse = httpx2.Limits(max_keepalive_connections=0)
    async with httpx2.AsyncClient(
        verify=tls, trust_env=False, timeout=None, limits=no_reuse
    ) as client:
        for hop in range(MAX_REDIRECTS + 1):
            hop_target = target(url, param=param, hop=hop)
            address = await _checked_address(hop_target, param, hop)
            request_url, headers, extensions = hop_target.request(address)
            try:
                async with client.stream(
                    "GET", request_url, headers=headers, extensions=extensions
                ) as response:
                    if response.status_code not in REDIRECTS:
                        return await _body(response, param)
                    url = _redirect(hop_target, response, param)
            except httpx2.HTTPError as error:
                raise ApiError(
                    f"{param}: the image could not be fetched ({type(error).__name__})",
                    param=param,
                ) from None
    raise ApiError(f"{param}: the image URL redirects more than {MAX_REDIRECTS} times", param=param)


def _redirect(hop_target: Target, response: httpx2.Response, param: str) -> str:
    location = response.headers.get("location")
    if not location:
        raise ApiError(f"{param}: the image URL redirects to no location", param=param)
    try:
        return str(hop_target.url.join(location))
    except (httpx2.InvalidURL, ValueError):
        raise ApiError(f"{param}: the image URL redirects to an invalid URL", param=param) from None


async def _checked_address(hop_target: Target, param: str, hop: int) -> str:
    """The address to connect to: the host's first, once every one of them is allowed."""
    loop = asyncio.get_running_loop()
    try:
        found = await loop.getaddrinfo(hop_target.host, hop_target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise ApiError(f"{param}: {_where(hop)}'s host does not resolve", param=param) from None
    addresses = [parse_address(info[4][0]) for info in found]
    allowed = lab_settings.media_allow_private
    if not addresses or not all(is_allowed(address, allowed) for address in addresses):
        raise ApiError(
            f"{param}: {_where(hop)} leads to a private, loopback, link-local or otherwise "
            "non-public address, which this server does not fetch from",
            param=param,
        )
    return str(addresses[0])


async def _body(response: httpx2.Response, param: str) -> bytes:
    """A 200's body, of an image type or none declared, within the byte bound."""
    if response.status_code != 200:
        raise ApiError(f"{param}: the image URL answered HTTP {response.status_code}", param=param)
    declared = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if declared not in MIME_TYPES and declared not in UNTYPED:
        raise ApiError(
            f"{param}: the image URL serves {declared[:80]!r}, not an image of a supported type "
            f"({', '.join(MIME_TYPES)})",
            param=param,
        )
    limit = lab_settings.max_image_bytes
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise _too_large(param, limit)
    data = bytearray()
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) > limit:
            raise _too_large(param, limit)
    return bytes(data)


def _too_large(param: str, limit: int) -> ApiError:
    return ApiError(
        f"{param}: the image is larger than this server's limit of {limit} bytes", param=param
    )
