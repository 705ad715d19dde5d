"""Adapters switched on a running engine: no reload, per-batch sets, stacking, no cache mixing."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate as mlx_generate

from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
from inference.protocol.adapters import AdapterRef
from inference.protocol.events import Finished

from .helpers import chat_tokens, generate, submit

PROMPT = "What is the capital of France?"
TOKENS = 8


def write_adapter(folder, seed: int, layers=(26, 27, 28, 29), rank=4, scale=20.0):
    """A random LoRA on q_proj and v_proj of the last layers, in mlx-lm's adapter format."""
    folder.mkdir()
    mx.random.seed(seed)
    weights = {}
    for layer in layers:
        for name, out in (("q_proj", 576), ("v_proj", 192)):
            prefix = f"model.layers.{layer}.self_attn.{name}"
            weights[f"{prefix}.lora_a"] = mx.random.normal((576, rank)) * 0.05
            weights[f"{prefix}.lora_b"] = mx.random.normal((rank, out)) * 0.05
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    config = {
        "fine_tune_type": "lora",
        "num_layers": len(layers),
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0,
                            "keys": ["self_attn.q_proj", "self_attn.v_proj"]},
    }  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return AdapterRef(name=folder.name, path=str(folder))


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return write_adapter(root / "alpha", seed=1), write_adapter(root / "beta", seed=2)


@pytest.fixture(scope="module")
def adapter_engine(model_folder):
    # The quantized path: the same layers mlx-lm's own adapter loading wraps.
    engine = Engine(lambda: load_model(model_folder), config=EngineConfig(max_batch_size=4)).start()
    yield engine
    engine.shutdown()


def ask(engine, adapters=(), text=PROMPT) -> GenerationRequest:
    return GenerationRequest(
        prompt_tokens=chat_tokens(engine, text), max_tokens=TOKENS, adapters=tuple(adapters)
    )


def test_adapter_output_matches_mlx_lm_and_none_restores_the_base(
    adapter_engine, adapters, model_folder
):
    alpha, _ = adapters
    base = generate(adapter_engine, ask(adapter_engine)).text
    adapted = generate(adapter_engine, ask(adapter_engine, [alpha])).text
    assert adapted != base
    model, tokenizer = load(str(model_folder), adapter_path=alpha.path)
    prompt = chat_tokens(adapter_engine, PROMPT)
    reference = mlx_generate(model, tokenizer, prompt, max_tokens=TOKENS)
    assert adapted.strip() == reference.strip()
    assert generate(adapter_engine, ask(adapter_engine)).text == base


def test_stacked_adapters_differ_from_each_alone(adapter_engine, adapters):
    alpha, beta = adapters
    outputs = {
        names: generate(adapter_engine, ask(adapter_engine, refs)).text
        for names, refs in {"a": [alpha], "b": [beta], "a+b": [alpha, beta]}.items()
    }
    assert len(set(outputs.values())) == 3, outputs


def test_mixed_requests_each_get_their_own_adapters(adapter_engine, adapters):
    alpha, _ = adapters
    alone = {
        "base": generate(adapter_engine, ask(adapter_engine)).text,
        "alpha": generate(adapter_engine, ask(adapter_engine, [alpha])).text,
    }
    runs = [
        (kind, submit(adapter_engine, ask(adapter_engine, [alpha] if kind == "alpha" else [])))
        for kind in ["base", "alpha", "base", "alpha"]
    ]
    for kind, run in runs:
        assert isinstance(run.wait().end, Finished)
        assert run.text == alone[kind], kind


def test_prompt_cache_entries_never_cross_adapters(adapter_engine, tmp_path):
    gamma = write_adapter(tmp_path / "gamma", seed=3)  # no request has used it yet
    text = "Tell me one fact about Paris."
    generate(adapter_engine, ask(adapter_engine, text=text))  # cached under the base model
    first = submit(adapter_engine, ask(adapter_engine, [gamma], text=text)).wait()
    assert first.end.cached_tokens == 0
    again = submit(adapter_engine, ask(adapter_engine, [gamma], text=text)).wait()
    assert again.end.cached_tokens > 0 and again.text == first.text


def test_a_broken_adapter_fails_only_its_request(adapter_engine, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{}")
    run = submit(adapter_engine, ask(adapter_engine, [AdapterRef("broken", str(broken))])).wait()
    assert "cannot read the adapter" in run.end.message
    assert isinstance(generate(adapter_engine, ask(adapter_engine)).end, Finished)
