"""The CPU's fused decoder layers (fused_decode.py) on each family whose blocks the native
layers compute, told apart by structure and config (layer_shape.py): tiny random-weight
models quantized to 4 bits, their fused logits against mlx-lm's own blocks on the same
weights, and 64 greedy steps alike."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.utils import load_model as mlx_lm_load_model

from inference.engine.acceleration import quantized_kernel as qk
from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path
from inference.engine.acceleration.exact_attention import exact_attention
from inference.engine.acceleration.fused_decode import FusedLayer, HalfWrites
from inference.engine.acceleration.layer_shape import Shape, describe
from inference.engine.kv.rows import RowsKVCache, RowsQuantizedKVCache
from tests.architecture_models import build_folder

from .greedy_steps import assert_same_steps, greedy_steps

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
    "smollm3 NoPE": ("smollm3", {"no_rope_layer_interval": 2}, {"no RoPE"}),  # layer 2 has none
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
    # Mixtures of experts: the attention half native, the block's own MLP module the rest.
    "qwen3_moe": ("qwen3_moe", {}, {"q/k head norms", "its own MLP (Qwen3MoeSparseMoeBlock)"}),
    "mixtral": ("mixtral", {}, {"its own MLP (MixtralSparseMoeBlock)"}),
    "granitemoe": ("granitemoe", {}, {"residual multiplier", "its own MLP (GraniteMoeMoE)"}),
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
    reference = quantized(folder)  # its caches store float16, as the fused layers do
    got = greedy_steps(fused, PROMPT, STEPS)
    assert_same_steps(got, greedy_steps(reference, PROMPT, STEPS, HalfWrites))


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
    got = greedy_steps(fused, PROMPT, STEPS)
    assert_same_steps(got, greedy_steps(reference, PROMPT, STEPS, HalfWrites))


@pytest.mark.parametrize("case", ["gemma3", "olmo2", "phi3 partial", "granite", "granitemoe"])
@pytest.mark.parametrize(
    "make_cache",
    [RowsKVCache, lambda padding: RowsQuantizedKVCache(padding, group_size=32, bits=8)],
    ids=["plain rows: the native calls", "quantized rows: the shape's own composition"],
)
def test_a_verifying_pass_is_each_position_s_one_token_step(kernel, case, make_cache, tmp_path):
    # Speculative decoding's exactness for each layout of norms, projections and residuals:
    # 4 positions at once, inside exact_attention, give bit for bit 4 one-token steps.
    model_type, changes, _ = FAMILIES[case]
    wider = {**changes, "hidden_size": 128, "head_dim": 32}  # heads a quantized row's groups fit
    model = quantized(build_folder(model_type, tmp_path / "model", _tokenizer(), **wider))
    apply_fast_path(model, FastPathOptions(weights="kernel"))
    assert all(isinstance(block, FusedLayer) for block in model.layers)
    prompts = [PROMPT, PROMPT[:5]]
    padding = [0, 4]
    batch = mx.array([[0] * pad + p for pad, p in zip(padding, prompts, strict=True)])
    drafts = mx.array([[11, 12, 13, 14], [21, 22, 23, 24]])
    results = []
    for at_once in (True, False):
        cache = [make_cache(padding) for _ in model.layers]
        model(batch, cache=cache)
        if at_once:
            with exact_attention():
                results.append(model(drafts, cache=cache))
        else:
            steps = [model(drafts[:, i : i + 1], cache=cache) for i in range(4)]
            results.append(mx.concatenate(steps, axis=1))
    assert mx.array_equal(results[0], results[1])


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
