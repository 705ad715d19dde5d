"""DRF authentication for /api: an API key of the user (or a session, DRF's own, with CSRF)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from .api_keys import KeyCheck, check_key, key_user, presented_key

BEARER = "bearerAuth"
X_API_KEY = "apiKeyAuth"


class ApiKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer <key>` or `x-api-key: <key>`, acting as the key's user.

    Unlike /v1, /api is never open: a key sent here is always checked.
    """

    def authenticate(self, request: Request):
        raw = presented_key(request._request)
        if raw is None:
            return None  # let the session authentication try
        check = check_key(raw)
        if not check.ok:
            raise AuthenticationFailed(check.reason)
        user = key_user(check)
        if user is None or not user.is_active:
            # Static keys (MLXLAB_API_KEYS) act for the service user (api_keys.service_user).
            raise AuthenticationFailed("This static API key has no active user to act for.")
        return user, check

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) when credentials are missing.
        return 'Bearer realm="mlxlab"'


def request_key(request: Request) -> KeyCheck | None:
    """The API key a request authenticated with, or None for a session."""
    return request.auth if isinstance(request.auth, KeyCheck) else None


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Both headers in the OpenAPI schema, as alternatives."""

    target_class = ApiKeyAuthentication
    name = [BEARER, X_API_KEY]

    def get_security_requirement(self, auto_schema):
        return [{BEARER: []}, {X_API_KEY: []}]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "http", "scheme": "bearer", "description": "An MLX Lab API key (mlx-...)"},
            {"type": "apiKey", "in": "header", "name": "x-api-key"},
        ]
