"""The quantized matmul kernel (native/quantized_matmul): against MLX, on the model, and absent."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.generate import generate_step

from inference.engine import load_model
from inference.engine.acceleration import quantized_kernel as qk
from inference.engine.acceleration.dense_weights import (
    FastPathOptions,
    apply_fast_path,
    quantized_layers,
)
from native import quantized_matmul

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three colors.",
]
# Decode rows (1-8), odd ones, and prefill rows (the sgemm path at 16 and more).
SHAPES = [(1, 7, 256), (2, 33, 128), (5, 130, 384), (8, 64, 512), (17, 65, 256), (40, 19, 128)]


@pytest.fixture(scope="module")
def kernel():
    state = qk.kernel_state()
    if not state.available:
        pytest.fail(f"the kernel should be built by make setup: {state.reason}")
    return qk._module


@pytest.fixture(params=["widest", "avx2"])
def tiles(kernel, request):
    """The kernel with its widest tiles (AVX-512 where the CPU has it), then the AVX2 ones."""
    kernel.set_avx512_allowed(request.param == "widest")
    yield kernel
    kernel.set_avx512_allowed(True)


@pytest.fixture(scope="module")
def quantized(model_folder):
    return load_model(model_folder, fast_path=FastPathOptions(enabled=False))


@pytest.fixture
def no_kernel(monkeypatch):
    """The kernel state as a process without the library sees it; restored afterwards."""
    qk.reset_kernel_state()
    yield monkeypatch
    monkeypatch.undo()
    qk.reset_kernel_state()
    qk.kernel_state()  # loaded again: the session's engine routes its layers through it


def _close(got: mx.array, want: mx.array) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    error = mx.abs(got.astype(mx.float32) - want.astype(mx.float32)).max().item()
    scale = 1.0 + mx.abs(want.astype(mx.float32)).max().item()
    limit = 1e-4 if want.dtype == mx.float32 else 1e-2
    assert error <= limit * scale, error


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_random_shapes_match_mlx(tiles, bits, group_size):
    mx.random.seed(bits * 1000 + group_size)
    for rows, columns, depth in SHAPES:
        if depth % group_size:
            continue
        weights = mx.random.normal((columns, depth))
        w, scales, biases = mx.quantize(weights, group_size=group_size, bits=bits)
        x = mx.random.normal((rows, depth))
        want = mx.quantized_matmul(x, w, scales, biases, group_size=group_size, bits=bits)
        _close(tiles.quantized_matmul(x, w, scales, biases, group_size, bits), want)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 128])
def test_the_opt_in_int8_activations_stay_near_mlx(kernel, bits, group_size):
    """x as int8 per 32 values (MLXLAB_QMM_INT8=1): about 1% of the largest output off."""
    mx.random.seed(21)
    w, scales, biases = mx.quantize(mx.random.normal((130, 512)), group_size=group_size, bits=bits)
    assert not kernel.int8_activations()
    kernel.set_int8_activations(True)
    try:
        for rows in (1, 3, 8):
            x = mx.random.normal((rows, 512))
            want = mx.quantized_matmul(x, w, scales, biases, group_size=group_size, bits=bits)
            got = kernel.quantized_matmul(x, w, scales, biases, group_size, bits)
            error = mx.abs(got - want).max().item()
            assert 0 < error <= 3e-2 * mx.abs(want).max().item(), error
    finally:
        kernel.set_int8_activations(False)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_int16_activations_stay_within_float_tolerance(kernel, bits, group_size):
    """x as int16 per 32 values (MLXLAB_QMM_INT16=1): within the float tiles' tolerance of
    MLX, and nearer than int8, on weights far from centred (the correction's case)."""
    mx.random.seed(16)
    weights = mx.random.normal((130, 512)) + 3.0  # every q far above the middle
    w, scales, biases = mx.quantize(weights, group_size=group_size, bits=bits)
    assert not kernel.int16_activations()
    kernel.set_int16_activations(True)
    try:
        for rows in (1, 3, 8):
            x = mx.random.normal((rows, 512)) + 0.5  # sums of x far from zero
            want = mx.quantized_matmul(x, w, scales, biases, group_size=group_size, bits=bits)
            got = kernel.quantized_matmul(x, w, scales, biases, group_size, bits)
            _close(got, want)
            error = mx.abs(got - want).max().item()
            assert 0 < error <= 1e-4 * mx.abs(want).max().item(), error
    finally:
        kernel.set_int16_activations(False)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 128])
def test_int16_rows_are_alike_alone_and_in_a_prefill_call(kernel, bits, group_size):
    """With int16 activations, a row's output is the same whether its call is a decode
    step's (the int16 tiles) or a prefill's (sgemm from 16 rows): a row's tokens must not
    depend on its batch. The float tiles and sgemm agree to ~3e-7; before the sgemm path
    took x's int16 image, the two differed by 2e-6 of the largest output."""
    if not kernel.blas_found():
        pytest.skip("no OpenBLAS in this process: every call takes the tiles")
    mx.random.seed(17)
    w, scales, biases = mx.quantize(
        mx.random.normal((200, 512)) + 3.0, group_size=group_size, bits=bits
    )
    x = mx.random.normal((20, 512)) + 0.5
    assert kernel.blas_min_rows() <= 20
    kernel.set_int16_activations(True)
    try:
        batched = kernel.quantized_matmul(x, w, scales, biases, group_size, bits)
        alone = mx.concatenate(
            [kernel.quantized_matmul(x[i : i + 1], w, scales, biases, group_size, bits)
             for i in range(20)]
        )  # fmt: skip
    finally:
        kernel.set_int16_activations(False)
    error = mx.abs(batched - alone).max().item()
    assert error <= 1.5e-6 * mx.abs(alone).max().item(), error


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_inputs_and_leading_dimensions(kernel, dtype):
    w, scales, biases = mx.quantize(mx.random.normal((48, 256)), group_size=64, bits=4)
    scales, biases = scales.astype(dtype), biases.astype(dtype)
    x = mx.random.normal((2, 3, 256)).astype(dtype)
    # MLX accumulates half inputs in half; the kernel in float32, rounded once at the end.
    exact = mx.quantized_matmul(
        x.astype(mx.float32), w, scales.astype(mx.float32), biases.astype(mx.float32),
        group_size=64, bits=4,
    )  # fmt: skip
    _close(kernel.quantized_matmul(x, w, scales, biases, 64, 4), exact.astype(dtype))
    strided = mx.random.normal((256, 3)).T  # not row-contiguous
    want = mx.quantized_matmul(strided, w, scales, biases, group_size=64, bits=4)
    _close(kernel.quantized_matmul(strided, w, scales, biases, 64, 4), want)


def test_unsupported_arguments_are_refused(kernel):
    w, scales, biases = mx.quantize(mx.random.normal((8, 64)), group_size=32, bits=2)
    with pytest.raises(ValueError, match="bits"):
        kernel.quantized_matmul(mx.zeros((1, 64)), w, scales, biases, 32, 2)
    w, scales, biases = mx.quantize(mx.random.normal((8, 64)), group_size=32, bits=4)
    with pytest.raises(ValueError, match="last dimension"):
        kernel.quantized_matmul(mx.zeros((1, 32)), w, scales, biases, 32, 4)


def test_every_quantized_layer_of_the_default_model(kernel, quantized):
    layers = quantized_layers(quantized.model)
    assert len(layers) == 211
    mx.random.seed(21)
    for _, layer in layers:
        depth = layer["weight"].shape[1] * 32 // layer.bits
        for rows in (1, 3, 20):
            x = mx.random.normal((rows, depth))
            want = mx.quantized_matmul(
                x, layer["weight"], layer["scales"], layer["biases"],
                group_size=layer.group_size, bits=layer.bits,
            )  # fmt: skip
            got = kernel.quantized_matmul(
                x, layer["weight"], layer["scales"], layer["biases"], layer.group_size, layer.bits
            )
            _close(got, want)


def test_greedy_output_equals_mlx_quantized(model_folder, quantized):
    on_kernel = load_model(model_folder, fast_path=FastPathOptions(weights="kernel"))
    assert on_kernel.fast_path.path == "kernel", on_kernel.fast_path.reason
    assert on_kernel.fast_path.layers_on_kernel == 211
    assert on_kernel.fast_path.layers_fused == (30 if qk.fused_decode_enabled() else 0)
    # 135M parameters at 4 bits (8 for the embedding) with their scales: about 100 MB, a
    # fifth of the float32 copy the dense path keeps
    assert 60_000_000 < on_kernel.fast_path.quantized_weight_bytes < 140_000_000
    assert on_kernel.fast_path.kernel.split(",")[0] in ("avx512", "avx2", "scalar")
    assert quantized_layers(on_kernel.model) == []
    for text in PROMPTS:
        prompt = quantized.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True
        )
        want = _greedy_tokens(quantized.model, quantized.tokenizer, prompt, 16)
        assert _greedy_tokens(on_kernel.model, quantized.tokenizer, prompt, 16) == want, text


def _greedy_tokens(model, tokenizer, prompt: list[int], count: int) -> list[int]:
    tokens = []
    for token, _ in generate_step(mx.array(prompt), model, max_tokens=count):
        if token in tokenizer.eos_token_ids:
            break
        tokens.append(int(token))
    return tokens


def test_the_engine_runs_the_default_model_on_the_kernel(engine):
    report = engine.loaded.fast_path
    assert report.path == "kernel", report.reason
    assert report.dense_weight_bytes == 0 and report.layers_dequantized == 0
    assert report.layers_fused == (30 if qk.fused_decode_enabled() else 0)


def test_a_library_that_is_not_there_keeps_the_dense_path(no_kernel, model_folder):
    no_kernel.setenv("MLXLAB_QMM_LIBRARY", "/nowhere/_qmm.so")
    loaded = load_model(model_folder, fast_path=FastPathOptions(enabled=False))
    report = apply_fast_path(loaded.model, FastPathOptions())
    assert report.path == "fast" and "no quantized matmul kernel at /nowhere" in report.reason
    assert report.layers_on_kernel == 0 and report.layers_dequantized == 211


def test_turned_off_the_kernel_choice_stays_on_mlx(no_kernel, model_folder):
    no_kernel.setenv("MLXLAB_QMM_LIBRARY", "off")
    state = qk.kernel_state()
    assert not state.available and "turned off" in state.reason
    loaded = load_model(model_folder, fast_path=FastPathOptions(enabled=False))
    report = apply_fast_path(loaded.model, FastPathOptions(weights="kernel"))
    assert report.path == "quantized" and "turned off" in report.reason
    assert all(
        isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding)
        for _, m in quantized_layers(loaded.model)
    )


def test_a_library_is_imported_once_a_process(kernel):
    # A second copy of a nanobind module loses its classes (the CUDA step's `Model`).
    assert quantized_matmul.load() is quantized_matmul.load() is kernel


def test_a_failed_build_is_reported(no_kernel, tmp_path):
    from native import quantized_matmul as extension

    no_kernel.delenv("MLXLAB_QMM_LIBRARY", raising=False)
    (tmp_path / "status.json").write_text('{"ok": false, "reason": "cmake is not installed"}')
    no_kernel.setattr(extension, "BUILD", tmp_path)  # where its status.json is read
    state = qk.kernel_state()
    assert not state.available and "not built: cmake is not installed" in state.reason


def test_the_weight_choice_is_checked():
    with pytest.raises(ValueError, match="weights"):
        FastPathOptions(weights="fp8")


@pytest.mark.parametrize("bits", [4, 8])
def test_a_rows_result_does_not_depend_on_the_rows_beside_it(tiles, bits):
    # Below the sgemm path, row i of a product is bit for bit row i alone: a verifying pass
    # of speculative decoding (several positions at once) then computes each position as
    # its one-token step does, and drafting changes no logit.
    mx.random.seed(bits)
    w, scales, biases = mx.quantize(mx.random.normal((130, 576)), group_size=32, bits=bits)
    scales, biases = scales.astype(mx.float16), biases.astype(mx.float16)
    x = mx.random.normal((15, 576))
    alone = [tiles.quantized_matmul(x[i : i + 1], w, scales, biases, 32, bits) for i in range(15)]
    for rows in (2, 3, 4, 5, 8, 9, 15):
        together = tiles.quantized_matmul(x[:rows], w, scales, biases, 32, bits)
        for i in range(rows):
            assert mx.array_equal(together[i : i + 1], alone[i]), (rows, i)


@pytest.mark.parametrize("bits", [4, 8])
def test_a_product_is_the_same_on_one_thread_or_two(tiles, bits):
    # MLXLAB_QMM_PARALLEL_MIN only moves where a call splits its output columns over the
    # kernel's threads; a column is computed by one thread either way, so no bit changes.
    mx.random.seed(10 + bits)
    w, scales, biases = mx.quantize(mx.random.normal((520, 576)), group_size=64, bits=bits)
    x = mx.random.normal((3, 576))
    threads, least = tiles.thread_count(), tiles.parallel_min_work()
    try:
        tiles.set_thread_count(2)
        tiles.set_parallel_min_work(1 << 40)
        assert tiles.parallel_min_work() == 1 << 40
        alone = tiles.quantized_matmul(x, w, scales, biases, 64, bits)
        tiles.set_parallel_min_work(0)
        split = tiles.quantized_matmul(x, w, scales, biases, 64, bits)
    finally:
        tiles.set_thread_count(threads)
        tiles.set_parallel_min_work(least)
    assert mx.array_equal(alone, split)
    _close(split, mx.quantized_matmul(x, w, scales, biases, group_size=64, bits=bits))


@pytest.mark.parametrize("spin", [0, 200])
def test_the_extension_s_threads_compute_every_column_once(tiles, spin):
    # The caller and a worker claim shrinking runs of columns; spin 0 sends the worker to
    # sleep after each call, so every call also wakes it. Sizes cover runs that end inside
    # a 16-column block, one block, and the sgemm path's tiles (from 16 rows).
    mx.random.seed(spin)
    threads, least, idle = (
        tiles.thread_count(),
        tiles.parallel_min_work(),
        tiles.spin_microseconds(),
    )
    cases = []
    for columns, rows in ((1, 1), (17, 2), (250, 1), (700, 3), (1031, 8), (300, 20)):
        w, scales, biases = mx.quantize(mx.random.normal((columns, 256)), group_size=32, bits=4)
        cases.append((mx.random.normal((rows, 256)), w, scales, biases))
    try:
        tiles.set_parallel_min_work(0)
        tiles.set_spin_microseconds(spin)
        assert tiles.spin_microseconds() == spin
        results = {}
        for count in (1, 2):
            tiles.set_thread_count(count)
            results[count] = [
                [tiles.quantized_matmul(x, w, s, b, 32, 4) for x, w, s, b in cases]
                for _ in range(3)
            ]
            mx.eval(results[count])
    finally:
        tiles.set_thread_count(threads)
        tiles.set_parallel_min_work(least)
        tiles.set_spin_microseconds(idle)
    for one, two in zip(results[1][0], results[2][0], strict=True):
        assert mx.array_equal(one, two)
    for repeat in results[2][1:]:
        assert all(mx.array_equal(a, b) for a, b in zip(results[2][0], repeat, strict=True))


def test_a_worker_descheduled_mid_chunk_sends_the_kernel_to_one_thread(kernel):
    # A worker whose chunk takes 3 ms keeps the caller waiting past the 1 ms a stall is, and
    # the pool backs off (within 20 loops: under load the caller may be the one descheduled,
    # and find the worker done). A worker that is not held up does not make it back off (in
    # one of five tries at least: another process may deschedule it for real).
    assert kernel.backs_off_after(3000, 20)
    assert not all(kernel.backs_off_after(0, 3) for _ in range(5))
