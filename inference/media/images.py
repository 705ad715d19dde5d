"""An image a client sent, checked: one of the formats served, whose header reads, within
the bytes and pixels this server takes (MLXLAB_MAX_IMAGE_BYTES, MLXLAB_MAX_IMAGE_PIXELS).

The bytes are sniffed rather than trusted to the declared type: a client's `image/png`
may be a JPEG (served alike) or no image at all (refused here, a 400, rather than in the
worker's image processor). Only the header is read: the worker's processor decodes it.
"""

from __future__ import annotations

import hashlib
import io

from PIL import Image, UnidentifiedImageError
from PIL.Image import DecompressionBombError

from labsettings import lab_settings

from ..errors import ApiError
from ..protocol.media import image_part

# Magic numbers of the formats served, as their specifications give them.
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
)
MIME_TYPES = ("image/png", "image/jpeg", "image/webp")


def sniff(data: bytes) -> str | None:
    """The image type `data` starts like, of MIME_TYPES; None for anything else."""
    for signature, mime in SIGNATURES:
        if data.startswith(signature):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def checked_image(data: bytes, *, param: str) -> dict:
    """The message part of an image's bytes: its type, hash and bytes; a 400 otherwise."""
    _check_bytes(data, param)
    mime = sniff(data)
    if mime is None:
        raise ApiError(
            f"{param}: the data is not an image of a supported type ({', '.join(MIME_TYPES)})",
            param=param,
        )
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, DecompressionBombError, OSError, ValueError) as error:
        raise ApiError(f"{param}: the {mime} image cannot be read: {error}", param=param) from None
    if width < 1 or height < 1:
        raise ApiError(f"{param}: the image is empty ({width}x{height})", param=param)
    _check_pixels(width, height, param)
    return image_part(data, mime=mime, sha256=hashlib.sha256(data).hexdigest())


def _check_bytes(data: bytes, param: str) -> None:
    limit = lab_settings.max_image_bytes
    if len(data) > limit:
        raise ApiError(
            f"{param}: the image is {len(data)} bytes, more than this server's limit of "
            f"{limit} bytes",
            param=param,
        )


def _check_pixels(width: int, height: int, param: str) -> None:
    # The worker's processor decodes every pixel: the header's size bounds its work.
    limit = lab_settings.max_image_pixels
    if width * height > limit:
        raise ApiError(
            f"{param}: the image is {width}x{height}, more than this server's limit of "
            f"{limit} pixels (width x height)",
            param=param,
        )
