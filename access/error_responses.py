"""The error answers every /api operation documents in the OpenAPI schema."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse

from .serializers import ErrorDetailSerializer

ERROR_MEANINGS = {
    400: "Invalid JSON or fields ({'detail': ...} or {field: [messages]})",
    401: "No credentials, or a wrong, revoked or inactive user's API key",
    403: "Logged in but not allowed (staff only), or a session without its CSRF token",
    404: "No such object of yours",
    409: "The object is not in a state that allows this",
    413: "Request body over the limit for this path",
    415: "Body is not application/json",
    502: "The Hugging Face Hub could not be asked, or it refused (its words in detail)",
    503: "The job queue does not answer; nothing was recorded",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Documented error answers; every /api operation may also answer 401 and 413."""
    out = {}
    for code in sorted({*codes, 401, 413}):
        body = OpenApiTypes.OBJECT if code == 400 else ErrorDetailSerializer
        out[code] = OpenApiResponse(body, description=ERROR_MEANINGS[code])
    return out
