"""Body size limits (a 413 in each surface's shape) and CORS (no origin unless configured)."""

from __future__ import annotations

import httpx
import pytest
from django.test import override_settings

from inference.body_limits import body_limit

SMALL = {"max_request_bytes": 1000, "max_request_bytes_by_path": {"/api/": 100, "/v1/m": 500}}


@pytest.fixture
def small_limits(settings):
    settings.MLXLAB = settings.MLXLAB.replace(**SMALL)


def test_longest_prefix_wins(small_limits):
    assert body_limit("/v1/messages") == 500
    assert body_limit("/v1/chat/completions") == 1000
    assert body_limit("/api/keys") == 100


def padded(size: int) -> bytes:
    return b'{"pad": "' + b"x" * size + b'"}'


def test_openai_shape(client, db, small_limits):
    response = client.post("/v1/chat/completions", padded(1000), content_type="application/json")
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and "1000 bytes allowed" in error["message"]
    assert (
        client.post("/v1/models", padded(1000), content_type="application/json").status_code == 413
    )


def test_anthropic_shape(client, db, small_limits):
    response = client.post("/v1/messages", padded(500), content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"
    assert response.json()["type"] == "error"


def test_rest_api_and_admin_shapes(client, db, small_limits):
    response = client.post("/api/keys", padded(100), content_type="application/json")
    assert response.status_code == 413 and "detail" in response.json()
    admin = client.post("/admin/login/", {"username": "x" * 2000, "password": "y"})
    assert admin.status_code == 413 and admin["Content-Type"].startswith("text/plain")


def test_under_the_limit_passes(client, db, small_limits):
    # Past the limit check, an unknown field in a small body is no problem; the model is.
    response = client.post(
        "/v1/chat/completions",
        {"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
        content_type="application/json",
    )
    assert response.status_code == 404


def preflight(client, origin: str):
    return client.options(
        "/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
        },
    )


def test_no_origin_is_allowed_by_default(client, db):
    response = preflight(client, "https://app.example")
    assert "access-control-allow-origin" not in response.headers


def test_configured_origins_are_allowed(client, db):
    with override_settings(CORS_ALLOWED_ORIGINS=["https://app.example"]):
        allowed = preflight(client, "https://app.example")
        other = preflight(client, "https://evil.example")
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    allowed_headers = allowed.headers["access-control-allow-headers"]
    assert "x-api-key" in allowed_headers and "x-stainless-os" in allowed_headers
    assert "access-control-allow-origin" not in other.headers


NINE_MB = 9 * 1024 * 1024  # over the default 8 MiB of /v1, under the 64 MiB of uploads


def test_a_root_path_header_does_not_move_the_limit(lab_server):
    """The limit follows the path Django routes on, whatever Daphne-Root-Path says."""
    response = httpx.post(
        f"{lab_server.url}/api/datasets/uploads/v1/chat/completions",
        content=padded(NINE_MB),
        headers={"Daphne-Root-Path": "/api/datasets/uploads", "Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["code"] == "request_too_large"
    assert "on /v1/chat/completions" in response.json()["error"]["message"]


def test_a_chunked_body_is_refused_once_over_the_limit(lab_server):
    def chunks():
        for _ in range(10):
            yield b"x" * (1024 * 1024)

    response = httpx.post(
        f"{lab_server.url}/v1/messages",
        content=chunks(),
        headers={"Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 413, response.text[:300]
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "request_too_large"
