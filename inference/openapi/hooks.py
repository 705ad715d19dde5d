"""drf-spectacular postprocessing: add the plain-Django endpoints to the generated schema.

Two fields follow the running server, so the schema stays true to it: the
`max_tokens` maxima (MLXLAB_MAX_TOKENS_LIMIT) and whether /v1 may be called
without a key (only while no key exists).
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError

from access.api_keys import keys_exist
from access.authentication import BEARER, X_API_KEY
from labsettings import lab_settings

from . import (
    anthropic_paths,
    embeddings_paths,
    openai_paths,
    responses_paths,
    status_paths,
    streams,
)
from .common import ANTHROPIC_ERROR, ENGINE_UNAVAILABLE_ERROR, OPENAI_ERROR, Schema

SECURITY_SCHEMES = {
    BEARER: {"type": "http", "scheme": "bearer", "description": "An MLX Lab API key (mlx-...)"},
    X_API_KEY: {"type": "apiKey", "in": "header", "name": "x-api-key"},
}

TAGS = [
    {"name": "openai", "description": "OpenAI-compatible inference"},
    {"name": "anthropic", "description": "Anthropic Messages-compatible inference"},
    {"name": "status", "description": "Health and statistics"},
]


def inference_paths(*, limit: int, default_model: str) -> tuple[dict, dict]:
    """(paths, schema components) of /v1, /health, /stats and /engine."""
    paths: dict[str, Schema] = {
        **openai_paths.paths(default_model),
        **embeddings_paths.paths(default_model),
        **responses_paths.paths(default_model),
        **anthropic_paths.paths(default_model),
        **status_paths.paths(),
    }
    components: dict[str, Schema] = {
        "OpenAIError": OPENAI_ERROR,
        "AnthropicError": ANTHROPIC_ERROR,
        "EngineUnavailableError": ENGINE_UNAVAILABLE_ERROR,
        **openai_paths.components(limit),
        **embeddings_paths.components(),
        **responses_paths.components(limit),
        **anthropic_paths.components(limit),
        **status_paths.components(),
        **streams.components(),
    }
    return paths, components


def _security(open_api: bool) -> list[dict]:
    required = [{BEARER: []}, {X_API_KEY: []}, {"cookieAuth": []}]
    return [*required, {}] if open_api else required


def add_inference_api(result: dict, generator, request, public) -> dict:
    paths, components = inference_paths(
        limit=lab_settings.max_tokens_limit,
        default_model=lab_settings.default_model,
    )
    try:
        open_api = not keys_exist()
    except DatabaseError:  # `manage.py spectacular` without a database: it may be open
        open_api = True
    security = _security(open_api=open_api)
    for path, path_item in paths.items():
        for operation in path_item.values():
            staff_only = path in status_paths.STAFF_ONLY
            operation.setdefault("security", _security(open_api=False) if staff_only else security)
    result["paths"] = {**paths, **result.get("paths", {})}
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    clashes = set(schemas) & set(components)
    assert not clashes, f"schema component names used twice: {clashes}"
    schemas.update(components)
    schemes = result["components"].setdefault("securitySchemes", {})
    # A logged-in lab session also passes (with its CSRF token on unsafe methods).
    cookie = {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME}
    schemes.update(SECURITY_SCHEMES, cookieAuth=cookie)
    result["tags"] = [*TAGS, *result.get("tags", [])]
    return result
