"""/health, /stats, /engine and a replica's drain as OpenAPI operations."""

from __future__ import annotations

from .common import Schema, errors, json_content, nullable, obj, path_param, ref

EXIT = nullable(
    obj(
        {
            "code": nullable({"type": "integer"}),
            "signal": nullable({"type": "string"}),
            # A worker on another host: the address whose link was lost.
            "link": {"type": "string"},
        }
    )
)
WORKER_STATES = ["starting", "ready", "draining", "restarting", "stopped"]
ROUTED = obj({reason: {"type": "integer"} for reason in ("session", "prefix", "load", "turn")})
WORKER = obj(
    {
        "id": {"type": "string"},
        "role": {
            "enum": ["primary", "companion"],
            "description": "companion: a draft model's worker beside its target's (`primary`)",
        },
        "primary": {"type": "string", "description": "A companion's target worker's id"},
        "model": {"type": "string"},
        "replica": {
            "type": "integer",
            "description": "Its place among its model's replicas (0 for a model's only worker)",
        },
        "pid": nullable({"type": "integer"}),
        "state": {"enum": WORKER_STATES},
        "restarts": {"type": "integer"},
        "socket": {"type": "string"},
        "remote": {"type": "boolean"},
        "in_flight": {"type": "integer", "description": "This web process's requests there"},
        "queue": nullable({"type": "integer", "description": "Requests not yet in its batch"}),
        "prompt_cache": nullable(
            obj({k: {"type": "integer"} for k in ("entries", "bytes", "hits", "cached_tokens")})
        ),
        "routing": {
            "description": "For a model of several replicas: what this web process routed "
            "there and why, its prefix tree's characters, the sessions it holds",
            **obj(
                {
                    "routed": ROUTED,
                    "prefix_chars": {"type": "integer"},
                    "sessions": {"type": "integer"},
                }
            ),  # fmt: skip
        },
        "memory": nullable(
            obj(
                {
                    "active_bytes": {"type": "integer"},
                    "cache_bytes": {"type": "integer"},
                    "peak_bytes": {"type": "integer"},
                }
            )
        ),
    },
    ("id", "role", "pid", "state", "restarts", "socket", "memory"),
)
CURRENT_WORKER = {
    "state": {"enum": [*WORKER_STATES, "none", "unreachable"]},
    "pid": nullable({"type": "integer"}),
    "restarts": nullable({"type": "integer"}),
    "socket": nullable({"type": "string"}),
    "model": {"type": "string"},
    "last_exit": EXIT,
}
ENGINE = obj(
    {
        "isolated": {"const": True},
        **CURRENT_WORKER,
        "response_store": obj(
            {
                "entries": {"type": "integer"},
                "bytes": {"type": "integer"},
                "max_bytes": {"type": "integer"},
                "ttl_ms": {"type": "integer"},
            }
        ),
        "workers": {"type": "array", "items": ref("Worker")},
    },
    ("isolated", "state", "pid", "restarts", "socket", "model", "last_exit", "workers"),
)

# A stranger gets `status` and `in_flight`; a staff user's key or session, the rest too.
HEALTH = obj(
    {
        "status": {"enum": ["ok", "degraded"]},
        "isolated": {"const": True},
        "engine": obj({**CURRENT_WORKER, "in_flight": nullable({"type": "integer"})}),
        "workers": {"type": "array", "items": ref("Worker")},
        "in_flight": {"type": "integer"},
        "models_loaded": {"type": "array", "items": {"type": "string"}},
    },
    ("status", "in_flight"),
)

STATS = obj(
    {
        "status": {"const": "ok"},
        "server": {
            "description": "mlx-bun's server block: the process that answered (`serve`, the "
            "serving host), the default model, and when it started (milliseconds since the "
            "epoch).",
            **obj(
                {
                    "owner": {"const": "serve"},
                    "model": {"type": "string"},
                    "started_at": {"type": "integer"},
                },
                ("owner", "model", "started_at"),
            ),
        },
        "uptime_seconds": {"type": "number"},
        "in_flight": {"type": "integer"},
        "generated_tokens": {"type": "integer"},
        "models": {"type": "object", "additionalProperties": {"type": "object"}},
        "memory": {"type": "object"},
        "engine": ref("Engine"),
        "response_store": {"type": "object"},
        "unavailable": {"type": "string"},
    },
    ("status", "server", "in_flight", "generated_tokens", "models"),
)


def components() -> dict[str, Schema]:
    return {"Health": HEALTH, "Stats": STATS, "Engine": ENGINE, "Worker": WORKER}


# For staff only, whether or not the API is open.
REPLICA_ID = path_param("replica_id", description="A worker's id in /engine")
STAFF_ONLY = ("/stats", "/engine", "/metrics", "/engine/replicas/{replica_id}/drain")


def paths() -> dict[str, Schema]:
    return {
        "/health": {
            "get": {
                "operationId": "health",
                "summary": "Liveness: needs no key; the detail is for staff",
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
                "summary": "Tokens generated, decode speed, memory (staff)",
                "tags": ["status"],
                "responses": {
                    "200": {"description": "Statistics", "content": json_content(ref("Stats"))},
                    **errors("OpenAIError", 403),
                },
            }
        },
        "/engine": {
            "get": {
                "operationId": "engine",
                "summary": "The model workers: the default model's, then every resident one (staff)",
                "tags": ["status"],
                "responses": {
                    "200": {"description": "Engine report", "content": json_content(ref("Engine"))},
                    **errors("OpenAIError", 403),
                },
            }
        },
        "/engine/replicas/{replica_id}/drain": {
            "post": {
                "operationId": "replica_drain",
                "summary": "One replica out of rotation for a rolling restart: it finishes its "
                "streams while its model's other replicas take the new requests (staff; a "
                "session needs its CSRF token)",
                "tags": ["status"],
                "parameters": [REPLICA_ID],
                "responses": {
                    "202": {"description": "Draining", "content": json_content(ref("Worker"))},
                    **errors("OpenAIError", 403, 404),
                },
            },
            "delete": {
                "operationId": "replica_undrain",
                "summary": "Call a replica's drain off: it takes new requests again at once, in "
                "the same process (staff; a session needs its CSRF token)",
                "tags": ["status"],
                "parameters": [REPLICA_ID],
                "responses": {
                    "200": {"description": "In rotation", "content": json_content(ref("Worker"))},
                    **errors("OpenAIError", 403, 404),
                },
            },
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics, vLLM's families as mlxlab: (staff, or loopback "
                "with MLXLAB_METRICS=loopback; docs/DEPLOY.md)",
                "tags": ["status"],
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **errors("OpenAIError", 403),
                },
            }
        },
    }
