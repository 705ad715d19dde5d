"""HLG tone-curve sampling (`hlg`) on every surface, through the official SDKs against the
live server and its worker; how a request's fields resolve over MLXLAB_HLG_SAMPLING
(mlx-bun's resolveHlg), in-process."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from inference.api.anthropic_request import parse_messages_request
from inference.api.openai_request import parse_chat_completion, parse_completion
from inference.api.responses_request import parse_responses_call, responses_chat_call
from inference.chat.plan import plan_generation
from inference.model_registry import model_register
from inference.protocol.sampling import HLG_LIMITS, HlgParams, resolve_hlg
from labsettings import LabSettings, parsers

ASK = "Invent a name for a friendly dragon."
SEED = 7
ON = {"enabled": True}
# The SDKs' newest signatures leave some fields out (seed on Messages and Responses,
# temperature on Messages): extra_body carries them, as those SDKs' clients send them.


@pytest.fixture(scope="module")
def claude(lab_server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=lab_server.url, api_key="unused", max_retries=0)


def chat(client, claude, model, extra: dict) -> str:
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": ASK}], max_tokens=16,
        temperature=1.0, seed=SEED, extra_body=extra,
    )  # fmt: skip
    return reply.choices[0].message.content


def completion(client, claude, model, extra: dict) -> str:
    reply = client.completions.create(
        model=model, prompt=f"{ASK}\nName:", max_tokens=16, temperature=1.0, seed=SEED,
        extra_body=extra,
    )  # fmt: skip
    return reply.choices[0].text


def responses(client, claude, model, extra: dict) -> str:
    reply = client.responses.create(
        model=model, input=ASK, max_output_tokens=16, temperature=1.0, store=False,
        extra_body={"seed": SEED, **extra},
    )  # fmt: skip
    return reply.output_text


def messages(client, claude, model, extra: dict) -> str:
    reply = claude.messages.create(
        model=model, messages=[{"role": "user", "content": ASK}], max_tokens=16,
        extra_body={"temperature": 1.0, "seed": SEED, **extra},
    )  # fmt: skip
    return reply.content[0].text


SURFACES = [chat, completion, responses, messages]


@pytest.mark.parametrize("surface", SURFACES, ids=lambda surface: surface.__name__)
def test_hlg_with_a_seed_is_reproducible_and_differs_from_hlg_off(surface, client, claude, model):
    first = surface(client, claude, model, {"hlg": ON})
    again = surface(client, claude, model, {"hlg": {**ON, "width": 4, "toe": None}})  # the same
    off = surface(client, claude, model, {"hlg": {"enabled": False, "width": 1}})
    assert first == again
    assert off != first  # the same seed and temperature
    assert off == surface(client, claude, model, {})  # off is as if it were never sent


BAD = [
    ({"width": -1}, "hlg.width", "hlg.width must be between 0 and 1000"),
    ({"toe": 0}, "hlg.toe", "hlg.toe must be between 0.01 and 1000"),
    ({"shoulder": "4"}, "hlg.shoulder", "hlg.shoulder must be a number"),
    ({"pivot_offset": 1e9}, "hlg.pivot_offset", "hlg.pivot_offset must be between 0 and 1000"),
    ({"enabled": "yes"}, "hlg.enabled", "hlg.enabled must be of type bool"),
    ("on", "hlg", "hlg must be an object"),
]


@pytest.mark.parametrize("surface", SURFACES, ids=lambda surface: surface.__name__)
@pytest.mark.parametrize("hlg, param, message", BAD, ids=[param for _, param, _ in BAD])
def test_a_bad_hlg_is_a_400_in_the_surfaces_shape(surface, client, claude, model, hlg, param,
                                                  message):  # fmt: skip
    if surface is messages:
        with pytest.raises(anthropic.BadRequestError) as caught:
            surface(client, claude, model, {"hlg": hlg})
        assert caught.value.body == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": message},
        }
        return
    with pytest.raises(openai.BadRequestError) as caught:
        surface(client, claude, model, {"hlg": hlg})
    error = caught.value.body
    assert (error["message"], error["param"], error["type"]) == (
        message, param, "invalid_request_error",
    )  # fmt: skip


def test_the_model_publishes_what_a_request_gets_for_each_field_it_leaves_out(http, model):
    defaults = http.get(f"/v1/models/{model}").json()["defaults"]
    assert defaults["hlg"] == {"enabled": False, **HlgParams().knobs()}
    assert defaults["sources"]["hlg"] == "fallback"


# -- resolution, in-process ---------------------------------------------------------------


def test_resolve_hlg_is_mlx_buns_resolve_hlg():
    server = {"enabled": False, "width": 2.0, "toe": 9.0}
    cases = [
        (None, None, None),  # off unless enabled
        ({"width": 3}, None, None),
        (ON, None, HlgParams()),  # mlx-bun's 4/4/6/6
        ({**ON, "toe": 1}, None, HlgParams(toe=1)),
        (None, {"enabled": True}, HlgParams()),
        (None, server, None),  # the server's knobs, off until a request turns it on
        (ON, server, HlgParams(width=2, toe=9)),
        ({**ON, "toe": 3, "shoulder": None}, server, HlgParams(width=2, toe=3)),
        ({"enabled": False}, {**server, "enabled": True}, None),  # a request turns it off
        ({"pivot_offset": 8}, {**server, "enabled": True}, HlgParams(width=2, toe=9, pivot_offset=8)),
    ]  # fmt: skip
    for request, server_default, expected in cases:
        assert resolve_hlg(request, server_default) == expected, (request, server_default)


def test_hlg_sampling_takes_a_switch_knobs_or_a_requests_object():
    """Given at all it is on, unless it says off; the knobs bounded as a request's are."""
    forms = {
        "on": {"enabled": True},
        " Off ": {"enabled": False},
        "width=3, pivot_offset=5": {"enabled": True, "width": 3.0, "pivot_offset": 5.0},
        "enabled=no,shoulder=2": {"enabled": False, "shoulder": 2.0},
        '{"toe": 9, "enabled": null}': {"enabled": True, "toe": 9.0},
        '{"enabled": false, "width": 1}': {"enabled": False, "width": 1.0},
        " ": None,
    }
    for text, parsed in forms.items():
        assert LabSettings.from_environ({"MLXLAB_HLG_SAMPLING": text}).hlg_sampling == parsed
    assert parsers.HLG_LIMITS == HLG_LIMITS  # the setting's bounds are a request's


def plan(parse, body: dict):
    return asyncio.run(plan_generation(parse(body))).call.sampling.hlg


def _responses(body: dict):
    return responses_chat_call(parse_responses_call(body), [])


# Each surface's body for "plain", with its `hlg` (or none).
BODIES = {
    parse_chat_completion: lambda hlg: {"model": "plain", "messages": [{"role": "user",
                                        "content": ASK}], **hlg},  # fmt: skip
    parse_completion: lambda hlg: {"model": "plain", "prompt": ASK, **hlg},
    _responses: lambda hlg: {"model": "plain", "input": ASK, **hlg},
    parse_messages_request: lambda hlg: {"model": "plain", "max_tokens": 4,
                                         "messages": [{"role": "user", "content": ASK}], **hlg},
}  # fmt: skip


@pytest.fixture
def plain(transactional_db, model_folder) -> str:
    model_register(name="plain", path=model_folder)
    return "plain"


def test_the_servers_default_applies_and_a_requests_fields_win_field_by_field(plain, settings):
    settings.MLXLAB = settings.MLXLAB.replace(
        hlg_sampling={"enabled": True, "width": 2.0, "toe": 9.0}
    )
    for parse, body in BODIES.items():
        assert plan(parse, body({})) == HlgParams(width=2, toe=9), parse
        assert plan(parse, body({"hlg": {"toe": 3}})) == HlgParams(width=2, toe=3), parse
        assert plan(parse, body({"hlg": {"enabled": False, "toe": 3}})) is None, parse
    settings.MLXLAB = settings.MLXLAB.replace(hlg_sampling={"enabled": False, "toe": 9.0})
    body = BODIES[parse_chat_completion]
    assert plan(parse_chat_completion, body({})) is None
    assert plan(parse_chat_completion, body({"hlg": ON})) == HlgParams(toe=9)


def test_the_published_defaults_follow_the_server(settings, model_folder):
    from inference.sampling_defaults import sampling_defaults

    settings.MLXLAB = settings.MLXLAB.replace(hlg_sampling={"enabled": False, "toe": 9.0})
    defaults = sampling_defaults(model_folder).as_dict()
    assert defaults["hlg"] == {"enabled": False, **HlgParams(toe=9).knobs()}
    assert defaults["sources"]["hlg"] == "server"
