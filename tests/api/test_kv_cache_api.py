"""kv_bits, kv_group_size and quantized_kv_start on every surface; KV bytes in /stats."""

from __future__ import annotations

import pytest

from inference.chat.plan import kv_scheme
from inference.errors import ApiError
from inference.protocol.sampling import KVScheme
from tests.api.parse_surfaces import HI, SURFACES

KV = {"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0}

FAULTS = [
    ({"kv_bits": 2}, "kv_bits", "kv_bits must be 4 or 8"),
    ({"kv_bits": 16}, "kv_bits", "kv_bits must be 4 or 8"),
    ({"kv_bits": "8"}, "kv_bits", "kv_bits must be of type int"),
    ({"kv_bits": 8, "kv_group_size": 48}, "kv_group_size", "kv_group_size must be 32, 64 or 128"),
    ({"kv_bits": 8, "quantized_kv_start": -1}, "quantized_kv_start",
     "quantized_kv_start must be at least 0"),
]  # fmt: skip


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_reads_the_kv_fields(surface):
    call = SURFACES[surface](KV)
    assert call.kv == {"bits": 4, "group_size": 32, "start": 0}
    assert SURFACES[surface]({}).kv == {}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("body", "param", "message"), FAULTS)
def test_every_surface_refuses_bad_kv_fields_alike(surface, body, param, message):
    with pytest.raises(ApiError) as refused:
        SURFACES[surface](body)
    assert (refused.value.message, refused.value.param) == (message, param)


def test_the_request_then_the_model_then_the_server(settings):
    assert kv_scheme({}, "m") is None  # 16-bit unless someone says otherwise
    settings.MLXLAB = settings.MLXLAB.replace(
        kv_bits=8, quantized_kv_start=100, kv_by_model={"big": {"bits": 4}, "small": {"bits": None}}
    )
    assert kv_scheme({}, "m") == KVScheme(8, 64, 100)
    assert kv_scheme({}, "big") == KVScheme(4, 64, 100)
    assert kv_scheme({}, "small") is None
    assert kv_scheme({"bits": 8, "start": 0}, "small") == KVScheme(8, 64, 0)
    assert kv_scheme({"group_size": 32}, "big") == KVScheme(4, 32, 100)


# -- on the live server ------------------------------------------------------------------

QUANTIZED = {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 0, "max_tokens": 4}


def test_quantized_requests_are_served_on_every_surface(http, model, staff_http):
    chat = http.post("/v1/chat/completions", json={"model": model, "messages": HI, **QUANTIZED})
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["completion_tokens"] >= 1
    messages = http.post(
        "/v1/messages", json={"model": model, "messages": HI, **QUANTIZED, "kv_bits": 4}
    )
    assert messages.status_code == 200, messages.text
    quantized = {k: v for k, v in QUANTIZED.items() if k != "max_tokens"}
    responses = http.post(
        "/v1/responses",
        json={"model": model, "input": "Hi", "max_output_tokens": 4, "store": False, **quantized},
    )
    assert responses.status_code == 200, responses.text
    stats = staff_http.get("/stats").json()
    kv = stats["models"][model]["kv_cache"]
    assert kv["by_scheme"]["8-bit/64"]["peak_bytes"] > 0
    assert kv["by_scheme"]["4-bit/64"]["peak_bytes"] > 0
    assert kv["peak_bytes"] > 0 and isinstance(kv["bytes"], int)
    assert isinstance(stats["memory"]["kv_cache_bytes"], int)


def test_bad_kv_fields_are_400s_in_each_protocols_shape(http, model):
    bad = {"kv_bits": 3}
    chat = http.post("/v1/chat/completions", json={"model": model, "messages": HI, **bad})
    assert chat.status_code == 400
    assert chat.json()["error"]["param"] == "kv_bits"
    assert chat.json()["error"]["message"] == "kv_bits must be 4 or 8"
    messages = http.post(
        "/v1/messages", json={"model": model, "max_tokens": 4, "messages": HI, **bad}
    )
    assert messages.status_code == 400
    assert messages.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "kv_bits must be 4 or 8"},
    }
    responses = http.post("/v1/responses", json={"model": model, "input": "Hi", **bad})
    assert responses.status_code == 400
    assert responses.json()["error"]["param"] == "kv_bits"


def test_a_group_the_model_s_heads_cannot_hold_is_a_400(http, model):
    # SmolLM2-135M's heads are 64 wide: groups of 128 cannot quantize them.
    body = {"model": model, "messages": HI, "kv_bits": 8, "kv_group_size": 128, "max_tokens": 2}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "kv_group_size"
    assert error["message"] == "kv_group_size must divide this model's head dimension (64)"
