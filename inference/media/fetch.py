"""Where an image's bytes come from: a `data:` URL's own payload, base64 sent with its
type (Anthropic's `source`), or an http(s) URL, kept as a remote part that planning
fetches within bounds (remote.py). Parsers run off the event loop (the views'
`asyncio.to_thread`): decoding base64 and reading an image's header are CPU work."""

from __future__ import annotations

import base64
import binascii
import re

from ..errors import ApiError
from .images import MIME_TYPES, checked_image
from .remote import remote_image

# data:[<mime>][;<parameter>...][;base64],<payload> (RFC 2397)
DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?P<parameters>(;[^;,]*)*),", re.IGNORECASE)


def image_from_url(url: str, *, param: str) -> dict:
    """The image part for an image URL a client sent (`param` names it in a 400)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return checked_image(_data_url_bytes(url, param=param), param=param)
    if scheme in ("http", "https"):
        return remote_image(url, param=param)
    raise ApiError(f"{param}: an image URL must be an http(s) URL or a data: URL", param=param)


def image_from_base64(data: str, *, mime: str, param: str) -> dict:
    """The image part for base64 `data` declared of type `mime`."""
    _check_mime(mime.strip().lower(), param)
    return checked_image(decode_base64(data, param=param, what="its data"), param=param)


def _check_mime(mime: str, param: str) -> None:
    if mime not in MIME_TYPES:
        raise ApiError(
            f"{param}: images of type {mime or 'unnamed'!r} are not supported "
            f"(supported: {', '.join(MIME_TYPES)})",
            param=param,
        )


def _data_url_bytes(url: str, *, param: str) -> bytes:
    match = DATA_URL.match(url)
    if match is None:
        raise ApiError(f"{param}: a data: URL needs a comma before its payload", param=param)
    _check_mime(match["mime"].strip().lower(), param)
    parameters = [p.strip().lower() for p in match["parameters"].split(";") if p.strip()]
    if "base64" not in parameters:
        raise ApiError(f"{param}: an image data: URL must be base64-encoded", param=param)
    return decode_base64(url[match.end() :], param=param, what="the data: URL's payload")


def decode_base64(payload: str, *, param: str, what: str) -> bytes:
    """Standard base64, line breaks allowed (some clients wrap it); a 400 otherwise."""
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(f"{param}: {what} is not valid base64", param=param) from None
