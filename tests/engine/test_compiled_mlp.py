"""The compiled MLP half of decode steps, forced on here: the CPU has no GPU."""

from __future__ import annotations

import mlx.core as mx
import pytest

from inference.engine import load_model
from inference.engine.acceleration import compiled_mlp
from inference.engine.acceleration.accelerator import WarmUpShapes, warm_up
from inference.engine.acceleration.adapters import AdapterSlot
from inference.engine.acceleration.compiled_mlp import CompiledMLPBlock, compile_mlp_halves
from inference.engine.acceleration.dense_weights import FastPathOptions
from inference.engine.loop.generator import Generator

from .llama_blocks import greedy, mlx_lm_blocks, step_logits, tiny_llama

MIN_ROWS = 2  # lower than served, so that a short batch of the default model crosses it


@pytest.fixture(scope="module")
def loaded(model_folder):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(compiled_mlp.VARIABLE, "force")
        patch.setenv(compiled_mlp.MIN_BATCH_VARIABLE, str(MIN_ROWS))
        # Dense weights: mlx-lm's own blocks (the AVX2 kernel's fused ones are not eligible).
        return load_model(model_folder, fast_path=FastPathOptions(weights="dense"))


def _fresh(model) -> list[CompiledMLPBlock]:
    """Forget the compiled functions, so that any use of them traces (and is recorded)."""
    blocks = [b for b in model.model.layers if type(b) is CompiledMLPBlock]
    for block in blocks:
        object.__setattr__(block, "_mlxlab_half", None)
        block._mlxlab_traced.clear()
    return blocks


def _greedy(model, prompts: list[list[int]], tokens: int = 4) -> list[list[int]]:
    return greedy(model, prompts, tokens)


def _chat(loaded, texts: list[str]) -> list[list[int]]:
    template = loaded.tokenizer.apply_chat_template
    return [
        list(template([{"role": "user", "content": t}], add_generation_prompt=True)) for t in texts
    ]


def test_the_switch(monkeypatch):
    monkeypatch.delenv(compiled_mlp.VARIABLE, raising=False)
    assert not compiled_mlp.wanted(on_gpu=True)  # off unless asked: no gain measured yet
    monkeypatch.setenv(compiled_mlp.VARIABLE, "1")
    assert compiled_mlp.wanted(on_gpu=True) and not compiled_mlp.wanted(on_gpu=False)
    monkeypatch.setenv(compiled_mlp.VARIABLE, "0")
    assert not compiled_mlp.wanted(on_gpu=True)
    monkeypatch.setenv(compiled_mlp.VARIABLE, "force")
    assert compiled_mlp.wanted(on_gpu=False)
    monkeypatch.setenv(compiled_mlp.MIN_BATCH_VARIABLE, "16")
    assert compiled_mlp.min_batch() == 16


def test_the_loader_installs_it_when_forced(loaded):
    blocks = loaded.model.model.layers
    assert all(type(b) is CompiledMLPBlock for b in blocks)
    assert {b._mlxlab_min_batch for b in blocks} == {MIN_ROWS}
    # The parameter tree stays mlx-lm's: nothing of the compiled half is filed in it.
    assert set(loaded.model.parameters()["model"]["layers"][0]) == {
        "self_attn",
        "mlp",
        "input_layernorm",
        "post_attention_layernorm",
    }


@pytest.mark.parametrize("mixed", [True, False], ids=["mixed lengths", "one length"])
def test_greedy_tokens_are_mlx_lms(loaded, mixed):
    prompts = _chat(loaded, ["Name a color.", "What is the capital of France, in one word?"] * 2)
    if not mixed:
        prompts = [p[:18] for p in prompts]
    blocks = _fresh(loaded.model)
    compiled = _greedy(loaded.model, prompts)
    assert all(b._mlxlab_traced == {(4, 1, 576)} for b in blocks)  # it did run
    with mlx_lm_blocks(loaded.model, CompiledMLPBlock):
        assert compiled == _greedy(loaded.model, prompts)


def test_prefill_and_small_batches_run_mlx_lms_block(loaded):
    blocks = _fresh(loaded.model)
    prompts = _chat(loaded, ["Name a color.", "Say hi."])
    _greedy(loaded.model, prompts[:1], tokens=3)  # prefill, then steps of one row
    assert all(not b._mlxlab_traced for b in blocks)
    _greedy(loaded.model, prompts, tokens=3)  # two rows: the threshold
    assert all(b._mlxlab_traced == {(2, 1, 576)} for b in blocks)


# -- a tiny random model: weights, adapters and the warm-up ---------------------------------


@pytest.fixture
def tiny():
    model = tiny_llama(3)
    assert compile_mlp_halves(model, min_rows=MIN_ROWS) == 2
    return model


def test_weights_are_read_at_every_call_not_baked_in(tiny):
    before = step_logits(tiny)
    mlp = tiny.model.layers[0].mlp
    mlp.down_proj.weight = mlp.down_proj.weight * 3  # as a reload or an update does
    after = step_logits(tiny)
    assert tiny.model.layers[0]._mlxlab_traced == {(3, 1, 64)}  # the same compiled function
    assert not mx.allclose(before, after)
    with mlx_lm_blocks(tiny, CompiledMLPBlock):
        assert mx.allclose(after, step_logits(tiny), atol=1e-5)


def test_an_active_adapter_runs_mlx_lms_block(tiny):
    mlp = tiny.model.layers[1].mlp
    slot = AdapterSlot(mlp.up_proj)
    slot.updates["a"] = lambda x: mx.ones((*x.shape[:-1], 128))
    mlp.up_proj = slot
    quiet = step_logits(tiny)
    object.__setattr__(slot, "active", ("a",))
    adapted = step_logits(tiny)
    assert not mx.allclose(quiet, adapted)
    with mlx_lm_blocks(tiny, CompiledMLPBlock):
        assert mx.allclose(adapted, step_logits(tiny), atol=1e-5)


def test_the_warm_up_compiles_every_batch_size_it_serves_from_the_threshold(tiny):
    shapes = WarmUpShapes(max_batch_size=6, prefill_batch_size=2, prefill_step_size=16)
    generator = Generator(
        tiny,
        completion_batch_size=shapes.max_batch_size,
        prefill_batch_size=shapes.prefill_batch_size,
        prefill_step_size=shapes.prefill_step_size,
        stream=mx.new_stream(mx.default_device()),
    )
    warm_up(generator, shapes, vocab_size=256)
    served = [size for size in shapes.batch_sizes() if size >= MIN_ROWS]
    assert served == [2, 4, 6]
    for block in tiny.model.layers:
        traced = block._mlxlab_traced
        assert {(size, 1, 64) for size in served} <= traced
        assert all(length == 1 and rows >= MIN_ROWS for rows, length, _ in traced)
