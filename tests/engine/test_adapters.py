"""Adapters switched on a running engine: no reload, per-batch sets, stacking, no cache mixing;
an operator's mounts and unmounts between steps."""

from __future__ import annotations

import threading
import time

import pytest
from mlx_lm import load
from mlx_lm.generate import generate as mlx_generate

from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
from inference.engine.acceleration.adapters import AdapterError, AdapterSlot
from inference.protocol.adapters import AdapterRef
from inference.protocol.events import Finished
from tests.adapter_files import write_adapter

from .helpers import chat_tokens, generate, submit

PROMPT = "What is the capital of France?"
TOKENS = 8


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


# -- an operator's mounts (engine/loop/adapter_set.py), between steps -------------------


def between_steps(engine, function):
    """`function(runner)`'s value, run on the engine thread between two steps."""
    done, box = threading.Event(), {}

    def run(runner):
        try:
            box["value"] = function(runner)
        finally:
            done.set()

    engine.between_steps(run)
    assert done.wait(60)
    return box.get("value")


def test_a_mounted_adapter_answers_as_one_a_request_loads(adapter_engine, tmp_path):
    delta = write_adapter(tmp_path / "delta", seed=4)
    per_request = generate(adapter_engine, ask(adapter_engine, [delta])).text  # loaded lazily
    assert between_steps(adapter_engine, lambda r: r.adapters.unmount("delta", busy=False))
    assert "delta" not in between_steps(adapter_engine, lambda r: r.adapters.report)["loaded"]
    between_steps(adapter_engine, lambda r: r.adapters.mount(delta, busy=False))
    report = between_steps(adapter_engine, lambda r: r.adapters.report)
    assert "delta" in report["mounted"] and "delta" in report["loaded"]
    assert generate(adapter_engine, ask(adapter_engine, [delta])).text == per_request
    assert generate(adapter_engine, ask(adapter_engine)).text != per_request


def test_an_unmount_waits_for_the_rows_running_under_it(adapter_engine, tmp_path):
    epsilon = write_adapter(tmp_path / "epsilon", seed=5)
    between_steps(adapter_engine, lambda r: r.adapters.mount(epsilon, busy=False))
    alone = generate(adapter_engine, ask(adapter_engine, [epsilon])).text
    long = GenerationRequest(
        prompt_tokens=chat_tokens(adapter_engine, PROMPT), max_tokens=48, adapters=(epsilon,)
    )
    run = submit(adapter_engine, long)
    while not run.deltas:  # generating under it
        time.sleep(0.01)
    dropped = between_steps(
        adapter_engine, lambda r: r.adapters.unmount("epsilon", busy=r.size > 0)
    )
    assert dropped is False  # deferred: its rows keep it
    assert run.wait().text.startswith(alone)  # finished under the adapter
    report = between_steps(adapter_engine, lambda r: r.adapters.report)
    assert "epsilon" not in report["loaded"] and "epsilon" not in report["mounted"]
    assert (
        between_steps(adapter_engine, lambda r: r.adapters.unmount("epsilon", busy=False)) is None
    )
    # A request naming it later loads it again, and answers as before.
    assert generate(adapter_engine, ask(adapter_engine, [epsilon])).text == alone


def test_a_broken_mount_is_refused_and_leaves_nothing(adapter_engine, tmp_path):
    broken = tmp_path / "broken-mount"
    broken.mkdir()

    def mount(runner):
        try:
            runner.adapters.mount(AdapterRef("broken-mount", str(broken)), busy=False)
        except AdapterError as error:
            return str(error)

    assert "cannot read the adapter" in between_steps(adapter_engine, mount)
    assert (
        "broken-mount" not in between_steps(adapter_engine, lambda r: r.adapters.report)["loaded"]
    )


def test_with_every_adapter_dropped_the_model_is_its_own_again(adapter_engine):
    base = generate(adapter_engine, ask(adapter_engine)).text

    def drop_all(runner):
        for name in runner.adapters.report["loaded"]:
            runner.adapters.unmount(name, busy=False)
        return [
            path for path, m in runner.loaded.model.named_modules() if isinstance(m, AdapterSlot)
        ]

    assert between_steps(adapter_engine, drop_all) == []  # every layer its base layer again
    assert generate(adapter_engine, ask(adapter_engine)).text == base
