"""The CPU's fused decoder layers (fused_decode.py) on each family whose blocks have Llama's
shape, told apart by structure: tiny random-weight models quantized to 4 bits, their fused
logits against mlx-lm's own blocks on the same weights, and 64 greedy steps alike."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import KVCache
from mlx_lm.utils import load_model as mlx_lm_load_model

from inference.engine.acceleration import quantized_kernel as qk
from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path
from inference.engine.acceleration.fused_decode import FusedLayer, HalfWrites, describe
from tests.architecture_models import build_folder

# Family: what its blocks add to Llama's (describe's Shape).
FAMILIES = {
    "llama": (False, False),
    "qwen2": (True, False),  # q/k/v biases
    "qwen3": (False, True),  # q and k head norms
    "smollm3": (False, False),
}
STEPS = 64
PROMPT = [1, 504, 3458, 17, 4000, 3, 91, 12, 800]


@pytest.fixture(scope="module")
def kernel():
    qk.kernel_state()  # the extension loaded, as a model's load loads it
    if not qk.fused_decode_enabled():
        pytest.skip("the fused decode layers need an x86 build of the kernel (AVX2 or AVX-512)")


def quantized(folder) -> nn.Module:
    model, _ = mlx_lm_load_model(folder)
    nn.quantize(model, group_size=64, bits=4)
    mx.eval(model.parameters())
    return model


def greedy(model, half: bool) -> tuple[list[mx.array], list[int]]:
    """Each step's logits and token: the prompt, then STEPS one-token steps."""
    cache = [KVCache() for _ in model.layers]
    if half:  # stored as the fused layers store them
        cache = [HalfWrites(c) for c in cache]
    logits = model(mx.array([PROMPT]), cache=cache)[0, -1]
    steps, tokens = [], []
    for _ in range(STEPS):
        token = int(mx.argmax(logits).item())
        steps.append(logits)
        tokens.append(token)
        logits = model(mx.array([[token]]), cache=cache)[0, -1]
    return steps, tokens


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_runs_fused_as_mlx_lm_computes_it(kernel, family, tmp_path):
    folder = build_folder(family, tmp_path / family, _tokenizer(), seed=3)
    fused = quantized(folder)
    report = apply_fast_path(fused, FastPathOptions(weights="kernel"))
    layers = fused.model.layers
    assert report.layers_fused == len(layers), report.reason
    assert all(isinstance(block, FusedLayer) for block in layers)
    bias, head_norms = FAMILIES[family]
    shape = describe(layers[0])
    assert (shape.qkv_bias, shape.qk_norm_eps > 0) == (bias, head_norms)
    reference = quantized(folder)
    got, got_tokens = greedy(fused, half=False)
    want, want_tokens = greedy(reference, half=True)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert mx.abs(a - b).max().item() <= 1e-3 * (1.0 + mx.abs(b).max().item())


def test_a_block_of_another_shape_keeps_its_own_code(kernel, tmp_path):
    # Gemma 3's blocks carry two more norms: not Llama's shape, whatever their projections.
    fused = quantized(build_folder("gemma3_text", tmp_path / "gemma3", _tokenizer()))
    report = apply_fast_path(fused, FastPathOptions(weights="kernel"))
    assert report.layers_fused == 0
    assert not any(isinstance(block, FusedLayer) for block in fused.model.layers)


def _tokenizer():
    from tests.conftest import ROOT

    return ROOT / "var" / "models" / "smollm2-135m-instruct"
