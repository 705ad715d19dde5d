"""Mixture-of-experts layers on the quantized matmul kernel (quantized_kernel.py's
KernelSwitchLinear): the experts' gathered matmul grouped by expert on the extension, on
tiny random-weight MoE models quantized to 4 bits, against MLX's own gather_qmm."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.switch_layers import QuantizedSwitchLinear
from mlx_lm.utils import load_model as mlx_lm_load_model

from inference.engine.acceleration import quantized_kernel as qk
from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path
from tests.architecture_models import build_folder

from .greedy_steps import assert_same_steps, greedy_steps

STEPS = 24
# Long enough that mlx-lm's SwitchGLU sorts the tokens by expert (64 token-expert pairs and
# more): the sorted path as well as the plain one.
PROMPT = [(37 * i) % 4000 + 5 for i in range(40)]


@pytest.fixture(scope="module")
def kernel():
    qk.kernel_state()
    if not qk.kernel_state().available:
        pytest.skip(qk.kernel_state().reason)


def quantized(folder) -> nn.Module:
    model, _ = mlx_lm_load_model(folder)
    nn.quantize(model, group_size=64, bits=4)
    mx.eval(model.parameters())
    return model


def switches(model) -> list[nn.Module]:
    kinds = (QuantizedSwitchLinear, qk.KernelSwitchLinear)
    return [m for _, m in model.named_modules() if isinstance(m, kinds)]


@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral", "gpt_oss", "olmoe"])
def test_experts_run_on_the_kernel_as_mlx_computes_them(kernel, model_type, tmp_path):
    folder = build_folder(model_type, tmp_path / "model", _tokenizer(), seed=7)
    model = quantized(folder)
    experts = len(switches(model))
    assert experts > 0
    report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    assert all(type(m) is qk.KernelSwitchLinear for m in switches(model)), report.reason
    assert report.layers_on_kernel >= experts
    got = greedy_steps(model, PROMPT, STEPS)
    assert_same_steps(got, greedy_steps(quantized(folder), PROMPT, STEPS))


def test_a_batch_of_rows_each_with_its_experts(kernel, tmp_path):
    # Three rows of one batch, their tokens routed to different experts: each row's
    # output is what it is alone.
    model = quantized(build_folder("qwen3_moe", tmp_path / "model", _tokenizer(), seed=8))
    apply_fast_path(model, FastPathOptions(weights="kernel"))
    rows = mx.array([PROMPT[:12], PROMPT[12:24], PROMPT[24:36]])
    together = model(rows)
    for i in range(3):
        alone = model(rows[i : i + 1])
        assert mx.abs(together[i] - alone[0]).max().item() <= 1e-4


def test_indices_that_are_a_strided_view(kernel):
    # Llama 4 routes with argpartition(...)[..., :k]: its indices are a view whose rows
    # stand `experts` apart, flattened without a copy.
    layer = QuantizedSwitchLinear(64, 128, 4, bias=False, group_size=64, bits=4)
    twin = qk.KernelSwitchLinear(layer)
    x = mx.random.normal((1, 5, 1, 1, 64), key=mx.random.key(0))
    scores = mx.random.normal((1, 5, 4), key=mx.random.key(1))
    indices = mx.argpartition(-scores, kth=0, axis=-1)[..., :1]
    got, want = twin(x, indices), layer(x, indices)
    assert len(set(indices.flatten().tolist())) > 1
    assert mx.abs(got - want).max().item() <= 1e-4 * (1 + mx.abs(want).max().item())


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_a_token_broadcast_to_its_experts_and_a_strided_view(kernel, dtype):
    # A decode step hands the expert matmul one token repeated for each of its experts (a
    # broadcast: stride 0) and, for down, rows that may be a strided view: read row by row.
    w, scales, biases = mx.quantize(mx.random.normal((6, 32, 128)), group_size=64, bits=4)
    scales, biases = scales.astype(dtype), biases.astype(dtype)
    token = mx.random.normal((1, 1, 128), key=mx.random.key(3)).astype(dtype)
    indices = mx.array([4, 1, 5, 1], dtype=mx.uint32)
    strided = mx.random.normal((128, 4), key=mx.random.key(4)).astype(dtype).T[:, None, :]
    module = qk.kernel_module()
    for x in (mx.broadcast_to(token, (4, 1, 128)), strided):
        got = module.gather_quantized_matmul(x, w, scales, biases, indices, 64, 4)
        want = mx.gather_qmm(
            mx.contiguous(x).astype(mx.float32), w, scales.astype(mx.float32),
            biases.astype(mx.float32), rhs_indices=indices, transpose=True, group_size=64, bits=4,
        )  # fmt: skip
        assert got.dtype == dtype
        tolerance = 1e-4 if dtype == mx.float32 else 1e-2
        error = mx.abs(got.astype(mx.float32) - want.reshape(got.shape)).max().item()
        assert error <= tolerance * (1 + mx.abs(want).max().item())


def test_an_expert_index_out_of_range_is_an_error(kernel):
    layer = QuantizedSwitchLinear(64, 64, 4, bias=False, group_size=64, bits=4)
    twin = qk.KernelSwitchLinear(layer)
    x = mx.ones((1, 1, 1, 64))
    with pytest.raises(Exception, match="out of range"):
        mx.eval(twin(x, mx.array([[4]])))


def _tokenizer():
    from tests.conftest import ROOT

    return ROOT / "var" / "models" / "smollm2-135m-instruct"
