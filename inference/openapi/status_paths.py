"""/health and /stats as OpenAPI operations."""

from __future__ import annotations

from .common import Schema, errors, json_content, obj, ref

HEALTH = obj(
    {
        "status": {"enum": ["ok", "degraded"]},
        "in_flight": {"type": "integer"},
        "models_loaded": {"type": "array", "items": {"type": "string"}},
    },
    ("status", "in_flight", "models_loaded"),
)

STATS = obj(
    {
        "status": {"const": "ok"},
        "uptime_seconds": {"type": "number"},
        "in_flight": {"type": "integer"},
        "generated_tokens": {"type": "integer"},
        "models": {"type": "object", "additionalProperties": {"type": "object"}},
        "memory": {"type": "object"},
    },
    ("status", "in_flight", "generated_tokens", "models"),
)


def components() -> dict[str, Schema]:
    return {"Health": HEALTH, "Stats": STATS}


def paths() -> dict[str, Schema]:
    return {
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness: needs no key",
                "tags": ["status"],
                "security": [{}],
                "responses": {
                    "200": {"description": "Healthy", "content": json_content(ref("Health"))},
                    "503": {"description": "Degraded", "content": json_content(ref("Health"))},
                    **{code: r for code, r in errors("OpenAIError").items() if code != "401"},
                },
            }
        },
        "/stats": {
            "get": {
                "operationId": "stats",
                "summary": "Tokens generated, decode speed, memory",
                "tags": ["status"],
                "responses": {
                    "200": {"description": "Statistics", "content": json_content(ref("Stats"))},
                    **errors("OpenAIError"),
                },
            }
        },
    }
