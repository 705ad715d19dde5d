"""The CPU's fused decoder layers (fused_decode.py) on each family whose blocks the native
layers compute, told apart by structure and config (layer_shape.py): tiny random-weight
models quantized to 4 bits, their fused logits against mlx-lm's own blocks on the same
weights, and 64 greedy steps alike."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model as mlx_lm_load_model

from inference.engine.acceleration import quantized_kernel as qk
from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path
from inference.engine.acceleration.fused_decode import FusedLayer, HalfWrites
from inference.engine.acceleration.layer_shape import Shape, describe
from tests.architecture_models import build_folder

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # Small, so that a 16-wide head has periods on each side of the ramp and in it.
    "original_max_position_embeddings": 64,
}
YARN_ROPE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}
LONGROPE = {
    "type": "longrope",
    "long_factor": [1.0, 1.5, 2.0, 4.0],  # one a pair of the 8 rotated dims
    "short_factor": [1.0] * 4,
}
# Case: (model_type, config changes, what describe says its blocks add to Llama's).
FAMILIES = {
    "llama": ("llama", {}, set()),
    "llama-3.1 rope": ("llama", {"rope_scaling": LLAMA3_ROPE}, {"llama3 RoPE"}),
    "yarn rope": ("qwen3", {"rope_scaling": YARN_ROPE}, {"q/k head norms", "yarn RoPE"}),
    "qwen2": ("qwen2", {}, {"q/k/v biases"}),
    "qwen3": ("qwen3", {}, {"q/k head norms"}),
    "smollm3": ("smollm3", {}, set()),
    "gemma3": (
        "gemma3_text",
        {},
        {"norms after attention and MLP", "norms of 1 + weight", "q/k head norms", "gelu_approx"},
    ),
    "olmo2": ("olmo2", {}, {"norms after attention and MLP", "q/k norms across heads"}),
    "phi3": (
        "phi3",
        {
            "partial_rotary_factor": 0.5,
            "rope_scaling": LONGROPE,
            "max_position_embeddings": 16384,
            "original_max_position_embeddings": 1024,
        },
        {"fused q/k/v", "fused gate/up", "longrope RoPE"},
    ),
    "phi3 partial": (
        "phi3",
        {"partial_rotary_factor": 0.5},
        {"fused q/k/v", "fused gate/up", "partial RoPE"},
    ),
    "granite": ("granite", {}, {"residual multiplier"}),
}
STEPS = 64
PROMPT = [1, 504, 3458, 17, 4000, 3, 91, 12, 800]


@pytest.fixture(scope="module")
def kernel():
    qk.kernel_state()  # the extension loaded, as a model's load loads it
    if not qk.fused_decode_enabled():
        pytest.skip("the fused decode layers need an x86 build of the kernel (AVX2 or AVX-512)")


def quantized(folder, dtype=mx.float32) -> nn.Module:
    """The folder's model quantized to 4 bits, its other weights in `dtype` (bfloat16: as
    checkpoints on the Hub hold them)."""
    model, _ = mlx_lm_load_model(folder)
    model.set_dtype(dtype)
    nn.quantize(model, group_size=64, bits=4)
    mx.eval(model.parameters())
    return model


def greedy(model, half: bool) -> tuple[list[mx.array], list[int]]:
    """Each step's logits and token: the prompt, then STEPS one-token steps."""
    cache = make_prompt_cache(model)  # Gemma 3's sliding layers get their rotating caches
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


@pytest.mark.parametrize("case", sorted(FAMILIES))
def test_a_family_runs_fused_as_mlx_lm_computes_it(kernel, case, tmp_path):
    model_type, changes, extras = FAMILIES[case]
    folder = build_folder(model_type, tmp_path / "model", _tokenizer(), seed=3, **changes)
    fused = quantized(folder)
    report = apply_fast_path(fused, FastPathOptions(weights="kernel"))
    layers = fused.model.layers
    assert report.layers_fused == len(layers), report.reason
    assert report.not_fused is None
    assert all(isinstance(block, FusedLayer) for block in layers)
    assert set(report.fused_shape) == extras
    reference = quantized(folder)
    got, got_tokens = greedy(fused, half=False)
    want, want_tokens = greedy(reference, half=True)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert mx.abs(a - b).max().item() <= 1e-3 * (1.0 + mx.abs(b).max().item())


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text"])
def test_a_bfloat16_checkpoint_runs_fused_in_float32(kernel, model_type, tmp_path):
    # A checkpoint's norms, scales and biases in bfloat16 (Gemma's 1 + weight computed in
    # bfloat16, as its code does): the fused layers compute in float32, as mlx-lm's blocks
    # do on the same values widened (exactly) to float32; the embedding stays bfloat16 in
    # both (its rows come out rounded to bfloat16).
    folder = build_folder(model_type, tmp_path / "model", _tokenizer(), seed=5)
    fused = quantized(folder, mx.bfloat16)
    report = apply_fast_path(fused, FastPathOptions(weights="kernel"))
    assert report.layers_fused == len(fused.model.layers), report.reason
    reference = quantized(folder, mx.bfloat16)
    embedding = reference.model.embed_tokens.parameters()
    reference.set_dtype(mx.float32)
    reference.model.embed_tokens.update(embedding)
    got, got_tokens = greedy(fused, half=False)
    want, want_tokens = greedy(reference, half=True)
    assert got_tokens == want_tokens
    for a, b in zip(got, want, strict=True):
        assert mx.abs(a - b).max().item() <= 1e-3 * (1.0 + mx.abs(b).max().item())


def test_a_rope_the_native_layers_do_not_compute_keeps_its_own_code(kernel, tmp_path):
    # Dynamic NTK's frequencies move with the length: /stats says why no layer is fused.
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    folder = build_folder("llama", tmp_path / "model", _tokenizer(), rope_scaling=scaling)
    model = quantized(folder)
    report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    assert report.layers_fused == 0
    assert report.not_fused == "a RoPE of kind dynamic the native layers do not compute"
    assert "no layers fused: a RoPE of kind dynamic" in report.reason
    assert not any(isinstance(block, FusedLayer) for block in model.model.layers)


def test_a_block_called_with_other_arguments_keeps_its_own_code(kernel, tmp_path):
    # Ministral 3's blocks take a per-position query scale between x and the mask.
    model = quantized(build_folder("ministral3", tmp_path / "model", _tokenizer()))
    block = model.model.layers[0]
    report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    assert report.layers_fused == 0
    assert report.not_fused == "a block called with other arguments (x, attn_scale, mask, cache)"
    assert not isinstance(block, FusedLayer)
    assert not isinstance(describe(block), Shape)


def _tokenizer():
    from tests.conftest import ROOT

    return ROOT / "var" / "models" / "smollm2-135m-instruct"
