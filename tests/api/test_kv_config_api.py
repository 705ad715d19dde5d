"""`kv_config` (mlx-bun's per-layer KV schemes) on every surface: read alike by each parser,
resolved over kv_bits and the server's defaults, served by the live server's worker through
the official SDKs, refused in each protocol's own shape."""

from __future__ import annotations

import json

import anthropic
import pytest

from inference.chat.plan import kv_scheme
from inference.errors import ApiError
from inference.protocol.sampling import KVLayer, KVScheme
from tests.api.parse_surfaces import HI, SURFACES

FAULTS = [
    ({"kv_config": {"bits": 8}}, "kv_config must be a list with one entry per layer"),
    ({"kv_config": []}, "kv_config must be a list with one entry per layer"),
    ({"kv_config": [None, "q8"]}, "kv_config[1] is not a KV scheme"),
    ({"kv_config": [{"bits": 8, "scheme": "turbo"}]}, "kv_config[0] is not a KV scheme"),
    ({"kv_config": [{"bits": 3}]}, "kv_config[0].bits must be 4 or 8"),
    ({"kv_config": [{"bits": True}]}, "kv_config[0].bits must be 4 or 8"),
    ({"kv_config": [{"group_size": 64}]}, "kv_config[0].bits must be 4 or 8"),
    ({"kv_config": [{"bits": 8, "group_size": 48}]}, "kv_config[0].group_size must be 32, 64"),
]


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_reads_kv_config(surface):
    call = SURFACES[surface]({"kv_config": [None, {"bits": 8}, {"bits": 4, "group_size": 32}]})
    assert call.kv == {"layers": (None, KVLayer(8, 64), KVLayer(4, 32))}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("body", "message"), FAULTS)
def test_every_surface_refuses_a_bad_kv_config_alike(surface, body, message):
    with pytest.raises(ApiError) as refused:
        SURFACES[surface](body)
    assert refused.value.message.startswith(message)
    assert refused.value.param == "kv_config"


def test_kv_config_replaces_kv_bits_and_the_defaults(settings):
    settings.MLXLAB = settings.MLXLAB.replace(
        kv_bits=8, quantized_kv_start=100, kv_by_model={"big": {"bits": 4}}
    )
    layers = (None, KVLayer(8, 64))
    # mlx-bun's precedence (optiq's --kv-config over --kv-bits), and its start: 0 when unset.
    assert kv_scheme({"layers": layers}, "big") == KVScheme(start=0, layers=layers)
    explicit = {"layers": layers, "bits": 4, "group_size": 32, "start": 7}
    assert kv_scheme(explicit, "m") == KVScheme(start=7, layers=layers)


# -- on the live server ------------------------------------------------------------------

ASK = "Name three colours."


@pytest.fixture(scope="module")
def claude(lab_server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def layer_count(model_folder) -> int:
    return json.loads((model_folder / "config.json").read_text())["num_hidden_layers"]


def chat(client, claude, model, extra: dict, text: str = ASK):
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=8,
        temperature=0, extra_body=extra,
    )  # fmt: skip
    return reply.choices[0].message.content, reply.usage.prompt_tokens_details.cached_tokens


def completion(client, claude, model, extra: dict, text: str = ASK):
    reply = client.completions.create(
        model=model, prompt=text, max_tokens=8, temperature=0, extra_body=extra
    )
    return reply.choices[0].text, None


def responses(client, claude, model, extra: dict, text: str = ASK):
    reply = client.responses.create(
        model=model, input=text, max_output_tokens=8, temperature=0, store=False,
        extra_body=extra,
    )  # fmt: skip
    return reply.output_text, None


def messages(client, claude, model, extra: dict, text: str = ASK):
    reply = claude.messages.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=8,
        extra_body={"temperature": 0, **extra},
    )  # fmt: skip
    return reply.content[0].text, None


@pytest.mark.parametrize(
    "surface", [chat, completion, responses, messages], ids=lambda s: s.__name__
)
def test_one_scheme_for_every_layer_answers_as_kv_bits(surface, client, claude, model, layer_count):
    config = {"kv_config": [{"bits": 8, "group_size": 64}] * layer_count}
    uniform = {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 0}
    text, _ = surface(client, claude, model, config)
    assert text and text == surface(client, claude, model, uniform)[0]


def test_a_mixed_config_runs_and_keeps_its_cached_prompt_to_itself(
    client, claude, model, layer_count, staff_http
):
    text = "Describe a lighthouse in one sentence."
    mixed = [{"bits": 8} if i % 2 else None for i in range(layer_count)]
    other = [{"bits": 4} if i % 2 else None for i in range(layer_count)]
    first, cached = chat(client, claude, model, {"kv_config": mixed}, text)
    assert first and cached == 0
    again, reused = chat(client, claude, model, {"kv_config": mixed}, text)
    assert again == first and reused > 0  # its own entry
    assert chat(client, claude, model, {"kv_config": other}, text)[1] == 0
    # Another scheme may reuse a template's prefix cached by other tests, never this entry.
    for config in ({"kv_bits": 8, "quantized_kv_start": 0}, {}):
        assert chat(client, claude, model, config, text)[1] < reused
    schemes = staff_http.get("/stats").json()["models"][model]["kv_cache"]["by_scheme"]
    label = "mixed " + " ".join(["plain×1 8-bit/64×1"] * (layer_count // 2))
    assert schemes[label]["peak_bytes"] > 0


def test_a_bad_kv_config_is_a_400_in_each_protocols_shape(http, model, layer_count):
    short = {"kv_config": [{"bits": 8}] * (layer_count - 1)}  # the worker's check
    length = f"this model has {layer_count}, the request gave {layer_count - 1}"
    for body, message in [(short, length), ({"kv_config": ["q8"]}, "is not a KV scheme")]:
        chat = http.post("/v1/chat/completions", json={"model": model, "messages": HI, **body})
        assert chat.status_code == 400, chat.text
        assert chat.json()["error"]["param"] == "kv_config"
        assert message in chat.json()["error"]["message"]
        anthropic_body = {"model": model, "max_tokens": 4, "messages": HI, **body}
        refused = http.post("/v1/messages", json=anthropic_body)
        assert refused.status_code == 400 and refused.json()["type"] == "error"
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert message in refused.json()["error"]["message"]
        responses = http.post("/v1/responses", json={"model": model, "input": "Hi", **body})
        assert responses.status_code == 400 and responses.json()["error"]["param"] == "kv_config"
    wide = {"kv_config": [{"bits": 8, "group_size": 128}] + [None] * (layer_count - 1)}
    chat = http.post("/v1/chat/completions", json={"model": model, "messages": HI, **wide})
    assert chat.status_code == 400
    assert chat.json()["error"]["message"] == (
        "kv_config's group_size 128 must divide this model's head dimension (64)"
    )
