"""Fused q/k/v and gate/up projections, forced on here: the CPU has no GPU."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models import llama

from inference.engine.acceleration import fused_projections
from inference.engine.acceleration.adapters import AdapterSlot
from inference.engine.acceleration.fused_projections import FusedProjectionsBlock, fuse_projections

from .llama_blocks import greedy, mlx_lm_blocks, step_logits, tiny_llama


@pytest.fixture
def tiny():
    return tiny_llama(5)


def _greedy(model, prompts: list[list[int]], tokens: int = 8) -> list[list[int]]:
    return greedy(model, prompts, tokens)


def test_the_switch(monkeypatch):
    monkeypatch.delenv(fused_projections.VARIABLE, raising=False)
    assert fused_projections.wanted(on_gpu=True)  # on by default, on a GPU only
    assert not fused_projections.wanted(on_gpu=False)
    monkeypatch.setenv(fused_projections.VARIABLE, "0")
    assert not fused_projections.wanted(on_gpu=True)
    monkeypatch.setenv(fused_projections.VARIABLE, "force")
    assert fused_projections.wanted(on_gpu=False)


def test_the_weights_are_held_once_and_the_tree_stays_mlx_lms(tiny):
    before = {k: mx.array(v) for k, v in _flat(tiny)}
    assert fuse_projections(tiny) == 2
    after = dict(_flat(tiny))
    assert before.keys() == after.keys()
    assert all(mx.array_equal(before[k], after[k]) for k in before)
    block = tiny.model.layers[0]
    views, qkv, gate_up = block._mlxlab_fused
    assert qkv.weight.shape == (64 + 2 * 32, 64) and gate_up.weight.shape == (2 * 128, 64)
    assert views[0] is block.self_attn.q_proj.weight  # the model reads the fused weights


def _flat(model):
    from mlx.utils import tree_flatten

    return tree_flatten(model.parameters())


@pytest.mark.parametrize("mixed", [True, False], ids=["mixed lengths", "one length"])
def test_greedy_tokens_are_mlx_lms(tiny, mixed):
    prompts = [[3, 9, 27, 81, 243, 5, 15], [4, 16, 64], [7, 49, 87, 100], [2, 4, 8, 16]]
    if not mixed:
        prompts = [p[:3] for p in prompts]
    with mlx_lm_blocks(tiny, FusedProjectionsBlock):
        expected = _greedy(tiny, prompts)
        logits = step_logits(tiny)
    assert fuse_projections(tiny) == 2
    assert _greedy(tiny, prompts) == expected
    assert _greedy(tiny, prompts[:1]) == [expected[0]]  # one row: no mask at all
    assert mx.allclose(step_logits(tiny), logits, atol=1e-5)


def test_a_replaced_weight_is_fused_again(tiny):
    fuse_projections(tiny)
    before = step_logits(tiny)
    mlp = tiny.model.layers[0].mlp
    mlp.up_proj.weight = mlp.up_proj.weight * 3  # as a reload or an update does
    after = step_logits(tiny)
    assert tiny.model.layers[0]._mlxlab_fused[0][4] is mlp.up_proj.weight
    assert not mx.allclose(before, after)
    with mlx_lm_blocks(tiny, FusedProjectionsBlock):
        assert mx.allclose(after, step_logits(tiny), atol=1e-5)


def test_an_active_adapter_runs_mlx_lms_block(tiny):
    fuse_projections(tiny)
    attention = tiny.model.layers[1].self_attn
    slot = AdapterSlot(attention.v_proj)
    slot.updates["a"] = lambda x: mx.ones((*x.shape[:-1], 32))
    attention.v_proj = slot
    quiet = step_logits(tiny)
    object.__setattr__(slot, "active", ("a",))
    adapted = step_logits(tiny)
    assert not mx.allclose(quiet, adapted)
    with mlx_lm_blocks(tiny, FusedProjectionsBlock):
        assert mx.allclose(adapted, step_logits(tiny), atol=1e-5)


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_projections_fuse_and_give_mlx_lms_tokens(tiny, bits):
    nn.quantize(tiny, group_size=32, bits=bits)
    prompts = [[3, 9, 27, 81, 243, 5, 15], [4, 16, 64]]
    expected, logits = _greedy(tiny, prompts), step_logits(tiny)
    attention = tiny.model.layers[0].self_attn
    before = {key: mx.array(attention.k_proj[key]) for key in ("weight", "scales", "biases")}
    assert fuse_projections(tiny) == 2
    _, qkv, gate_up = tiny.model.layers[0]._mlxlab_fused
    assert qkv.quantization == gate_up.quantization == (32, bits)
    assert qkv.arrays[1].shape == (64 + 2 * 32, 64 // 32)  # scales: a group's each
    for key, value in before.items():  # each projection a view of the fused arrays
        assert mx.array_equal(attention.k_proj[key], value)
    assert _greedy(tiny, prompts) == expected
    assert mx.allclose(step_logits(tiny), logits, atol=1e-5)


def test_projections_quantized_differently_keep_mlx_lms_block(tiny):
    nn.quantize(tiny, group_size=32, bits=4)
    attention = tiny.model.layers[1].self_attn
    attention.v_proj = nn.QuantizedLinear.from_linear(
        nn.Linear(64, 32, bias=False), group_size=64, bits=8
    )
    assert fuse_projections(tiny) == 1
    assert type(tiny.model.layers[1]) is llama.TransformerBlock
