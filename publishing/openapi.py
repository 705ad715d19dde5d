"""The publishing endpoints in the OpenAPI schema (a drf-spectacular postprocessing hook).

They are plain async Django views (a push waits for its upload and notices a client
that hangs up), so drf-spectacular cannot see them; this describes them by hand.
"""

from __future__ import annotations

from access.authentication import BEARER, X_API_KEY
from inference.openapi.common import Schema, json_body, json_content, obj, ref

FAILURE = obj(
    {"ok": {"const": False}, "error": {"type": "string"}, "job": {"type": "object"}},
    ("ok", "error"),
)
TOKEN_STATE = obj(
    {
        "ok": {"const": True},
        "hasToken": {"type": "boolean"},
        "verified": {"type": "boolean"},
        "username": {"type": "string"},
    },
    ("ok", "hasToken"),
)
PUSH_REQUEST = obj(
    {
        "repo_id": {"type": "string", "minLength": 1, "description": "user/name on the Hub"},
        "private": {"type": ["boolean", "null"]},
        "job_id": {"type": ["string", "null"], "minLength": 1, "description": "a succeeded job"},
        "source_path": {
            "type": ["string", "null"],
            "minLength": 1,
            "description": "a folder inside the lab's artifacts directory",
        },
        "wait": {
            "type": ["boolean", "null"],
            "description": "false: answer at once (202) with the publish job to poll",
        },
    },
    ("repo_id",),
)
PUSHED = obj(
    {"ok": {"const": True}, "url": {"type": "string"}, "job": {"type": "object"}},
    ("ok", "url", "job"),
)
MEANINGS = {
    400: "Invalid body, no token saved, or the Hub refused (its message in `error`)",
    401: "No credentials, or a wrong or revoked API key",
    403: "Not staff, or a session without its CSRF token",
    405: "Method not allowed (see the Allow header)",
    413: "Request body larger than the limit for this path",
    499: "The client closed the request while waiting: the upload was cancelled",
    503: "The job queue does not answer; nothing was recorded",
}
SECURITY = [{BEARER: []}, {X_API_KEY: []}, {"cookieAuth": []}]


def _errors(*codes: int) -> dict[str, Schema]:
    out = {}
    for code in sorted({*codes, 401, 403, 405, 413}):
        out[str(code)] = {
            "description": MEANINGS[code],
            "content": json_content(ref("PublishFailure")),
        }
        if code == 405:
            out[str(code)]["headers"] = {"Allow": {"schema": {"type": "string"}}}
    return out


def _operation(operation_id: str, summary: str, responses: dict, body: Schema | None = None):
    operation = {
        "operationId": operation_id,
        "summary": summary,
        "tags": ["publishing"],
        "security": SECURITY,
        "responses": responses,
    }
    if body is not None:
        operation["requestBody"] = json_body(body)
    return operation


def paths() -> dict[str, Schema]:
    token = ref("HubTokenState")
    out = {
        "/api/settings/hf-token": {
            "get": _operation(
                "hf_token_get", "Whether a Hugging Face token is saved",
                {"200": {"description": "Token state", "content": json_content(token)}, **_errors()},
            ),
            "post": _operation(
                "hf_token_save", "Save the token (encrypted; checked with whoami)",
                {"200": {"description": "Saved", "content": json_content(token)}, **_errors(400)},
                obj({"token": {"type": "string", "minLength": 1}}, ("token",)),
            ),
            "delete": _operation(
                "hf_token_delete", "Remove the token",
                {"200": {"description": "Removed", "content": json_content(token)}, **_errors()},
            ),
        }
    }  # fmt: skip
    for kind in ("quantize", "finetune", "dataset"):
        pushed = json_content(ref("Pushed"))
        out[f"/api/{kind}/push"] = {
            "post": _operation(
                f"{kind}_push", f"Push a {kind} job's result to the Hugging Face Hub",
                {"200": {"description": "Pushed", "content": pushed},
                 "202": {"description": "Queued or still uploading: poll the job",
                         "content": pushed},
                 **_errors(400, 499, 503)},
                ref("PushRequest"),
            )
        }  # fmt: skip
    return out


def add_publishing_api(result: dict, generator, request, public) -> dict:
    result["paths"] = {**result.get("paths", {}), **paths()}
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(
        PublishFailure=FAILURE, HubTokenState=TOKEN_STATE, PushRequest=PUSH_REQUEST, Pushed=PUSHED
    )
    result["tags"] = [
        *result.get("tags", []),
        {"name": "publishing", "description": "Hugging Face Hub token and pushes (staff)"},
    ]
    return result
