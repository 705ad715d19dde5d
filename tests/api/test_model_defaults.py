"""The model's own sampling defaults: the request, then the operator's
MLXLAB_DEFAULT_*, then generation_config.json, then mlx-bun's fallback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from inference.api.openai_request import parse_chat_completion, parse_completion
from inference.chat.plan import plan_generation
from inference.model_registry import model_register
from tests.conftest import DEFAULT_MODEL, THINKING_GENERATION, THINKING_MODEL

HI = [{"role": "user", "content": "Hi"}]
AUTHOR = {"temperature": 0.9, "top_p": 0.95, "top_k": 20, "min_p": 0.05,
          "repetition_penalty": 1.1}  # fmt: skip
UNSET = {f"default_{name}": None for name in
         ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")}  # fmt: skip


@pytest.fixture
def models(transactional_db, settings, model_folder, tmp_path) -> dict[str, str]:
    """Two registered models: one whose author published defaults, one with none."""
    settings.MLXLAB = settings.MLXLAB.replace(**UNSET, thinking=None)
    authored = tmp_path / "authored"
    authored.mkdir()
    for item in model_folder.iterdir():
        if item.name != "generation_config.json":
            (authored / item.name).symlink_to(item)
    (authored / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, **AUTHOR}))
    model_register(name="authored", path=Path(authored))
    model_register(name="plain", path=model_folder)
    return {"authored": "authored", "plain": "plain"}


def plan(body: dict, *, text: bool = False):
    call = (parse_completion if text else parse_chat_completion)(body)
    return asyncio.run(plan_generation(call)).call


def sampling(body: dict, **options) -> dict:
    call = plan(body, **options).sampling
    return {name: getattr(call, name) for name in AUTHOR}


def test_a_request_that_sets_nothing_gets_the_models_own_defaults(models):
    assert sampling({"model": "authored", "messages": HI}) == AUTHOR


def test_a_model_without_defaults_gets_mlx_buns_fallback(models):
    assert sampling({"model": "plain", "messages": HI}) == {
        "temperature": 0.7, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 0.0,  # off
    }  # fmt: skip


def test_the_request_wins_then_the_operator(models, settings):
    settings.MLXLAB = settings.MLXLAB.replace(default_top_p=0.5, default_temperature=0.3)
    got = sampling({"model": "authored", "messages": HI, "temperature": 0.2})
    assert got == {**AUTHOR, "temperature": 0.2, "top_p": 0.5}


@pytest.mark.parametrize(
    "fields",
    [
        {"reasoning_effort": "none"},
        {"chat_template_kwargs": {"enable_thinking": False}},
    ],
)
def test_a_thinking_off_turn_runs_no_hotter_than_the_no_think_cap(models, fields):
    assert sampling({"model": "authored", "messages": HI, **fields})["temperature"] == 0.7
    thinking = {"model": "authored", "messages": HI, "reasoning_effort": "high"}
    assert sampling(thinking)["temperature"] == 0.9  # the author's, for thinking turns


def test_the_servers_thinking_default_applies_when_the_request_says_nothing(models, settings):
    settings.MLXLAB = settings.MLXLAB.replace(thinking=False)
    call = plan({"model": "authored", "messages": HI})
    assert call.chat.template_kwargs == {"enable_thinking": False}
    assert call.sampling.temperature == 0.7
    null = plan({"model": "authored", "messages": HI,
                 "chat_template_kwargs": {"enable_thinking": None}})  # fmt: skip
    assert "enable_thinking" not in null.chat.template_kwargs  # the template's own default
    assert null.sampling.temperature == 0.9


# A model that declares thinking off by default and a cooler cap (generation_config.json).
DECLARING = {**AUTHOR, "no_think_temperature": 0.5,
             "default_chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip


@pytest.fixture
def declaring(models, model_folder, tmp_path) -> str:
    folder = tmp_path / "declaring"
    folder.mkdir()
    for item in model_folder.iterdir():
        if item.name != "generation_config.json":
            (folder / item.name).symlink_to(item)
    (folder / "generation_config.json").write_text(json.dumps(DECLARING))
    model_register(name="declaring", path=folder)
    return "declaring"


def test_the_registry_records_what_a_model_declares_about_thinking(declaring):
    from inference.models import LanguageModel

    record = LanguageModel.objects.get(name="declaring")
    assert (record.thinking_default, record.no_think_temperature) == (False, 0.5)
    plain = LanguageModel.objects.get(name="authored")  # declares neither
    assert (plain.thinking_default, plain.no_think_temperature) == (None, None)


def test_the_models_thinking_default_and_cap_apply_when_the_request_says_nothing(
    declaring, settings
):
    settings.MLXLAB = settings.MLXLAB.replace(no_think_temperature=0.6)  # the generic cap
    call = plan({"model": "declaring", "messages": HI})
    assert call.chat.template_kwargs == {"enable_thinking": False}
    assert call.sampling.temperature == 0.5  # the model's cap wins over the server's
    # A model that declares no cap gets the server's.
    assert (
        sampling({"model": "authored", "messages": HI, "reasoning_effort": "none"})["temperature"]
        == 0.6
    )


def test_the_request_wins_over_the_model_and_the_operator_over_the_model(declaring, settings):
    effort = plan({"model": "declaring", "messages": HI, "reasoning_effort": "high"})
    assert (effort.chat.template_kwargs, effort.sampling.temperature) == (
        {"enable_thinking": True}, 0.9,
    )  # fmt: skip
    null = plan({"model": "declaring", "messages": HI,
                 "chat_template_kwargs": {"enable_thinking": None}})  # fmt: skip
    assert null.chat.template_kwargs == {} and null.sampling.temperature == 0.9
    # MLXLAB_THINKING, set, is the operator's choice for every model, as mlx-bun's
    # --thinking is: a model's declaration applies under it.
    settings.MLXLAB = settings.MLXLAB.replace(thinking=True)
    server = plan({"model": "declaring", "messages": HI})
    assert (server.chat.template_kwargs, server.sampling.temperature) == (
        {"enable_thinking": True}, 0.9,
    )  # fmt: skip


def test_the_published_defaults_say_where_thinking_comes_from(declaring):
    from inference.models import LanguageModel
    from inference.sampling_defaults import sampling_defaults

    record = LanguageModel.objects.get(name="declaring")
    defaults = sampling_defaults(record.path, record.thinking_declaration())
    assert (defaults.enable_thinking, defaults.no_think_temperature) == (False, 0.5)
    assert defaults.sources["enable_thinking"] == defaults.sources["no_think_temperature"]
    assert defaults.sources["enable_thinking"] == "model"


@pytest.mark.parametrize(
    "config",
    ["not json", "[1]", '{"default_chat_template_kwargs": {"enable_thinking": "no"}, '
     '"no_think_temperature": -1}'],
)  # fmt: skip
def test_a_declaration_that_is_not_usable_declares_nothing(tmp_path, config):
    from inference.sampling_defaults import ThinkingDeclaration, declared_thinking

    (tmp_path / "generation_config.json").write_text(config)
    assert declared_thinking(tmp_path) == ThinkingDeclaration()
    assert declared_thinking(tmp_path / "missing") == ThinkingDeclaration()


def test_an_operators_temperature_is_not_capped(models, settings):
    settings.MLXLAB = settings.MLXLAB.replace(default_temperature=1.0)
    body = {"model": "authored", "messages": HI, "reasoning_effort": "none"}
    assert sampling(body)["temperature"] == 1.0


def test_length_without_max_tokens(models, settings):
    chat = plan({"model": "plain", "messages": HI})
    text = plan({"model": "plain", "prompt": "Once"}, text=True)
    assert (chat.max_tokens, chat.default_max_tokens) == (None, 65_536)  # the context decides
    assert text.default_max_tokens == 512
    settings.MLXLAB = settings.MLXLAB.replace(default_max_tokens=100)
    assert plan({"model": "plain", "messages": HI}).default_max_tokens == 100
    assert plan({"model": "plain", "prompt": "Once"}, text=True).default_max_tokens == 100


# -- on the live server: TEST_SAMPLING sets temperature 0 and a 512-token cap there ----


def test_the_effective_defaults_are_published_per_model(http):
    thinking = http.get(f"/v1/models/{THINKING_MODEL}").json()["defaults"]
    assert thinking["top_p"] == THINKING_GENERATION["top_p"]
    assert thinking["temperature"] == 0.0  # the operator's (the suite's) wins over 0.9
    assert thinking["sources"]["top_p"] == "model"
    assert thinking["sources"]["temperature"] == "server"
    assert thinking["sources"]["top_k"] == "fallback"
    plain = http.get(f"/v1/models/{DEFAULT_MODEL}").json()["defaults"]
    assert (plain["top_p"], plain["chat_max_tokens"], plain["no_think_temperature"]) == (
        1.0, 512, 0.7,
    )  # fmt: skip


def test_a_loaded_model_says_whether_its_rows_share_a_batch(http):
    http.post("/v1/completions", json={"model": DEFAULT_MODEL, "prompt": "Hi", "max_tokens": 1})
    batching = http.get(f"/v1/models/{DEFAULT_MODEL}").json()["batching"]
    assert batching == {"rows": "together", "prompts": "together", "why": None}


def test_a_response_echoes_the_sampling_it_ran_with(http):
    body = {"model": THINKING_MODEL, "input": "Hi", "max_output_tokens": 2, "store": False}
    reply = http.post("/v1/responses", json=body).json()
    assert (reply["temperature"], reply["top_p"]) == (0.0, THINKING_GENERATION["top_p"])


def test_the_servers_default_adapter_applies_to_its_own_model(models, settings, tmp_path):
    from inference.models import Adapter

    Adapter.objects.create(name="house", base_model="plain", path=str(tmp_path / "house"))
    settings.MLXLAB = settings.MLXLAB.replace(default_adapter="house")
    assert [a.name for a in plan({"model": "plain", "messages": HI}).adapters] == ["house"]
    opted_out = plan({"model": "plain", "messages": HI, "adapter": "none"})
    assert opted_out.adapters == ()
    # Trained on another model: a request for this one runs without it, not a 400.
    assert plan({"model": "authored", "messages": HI}).adapters == ()
