"""The CPU fast path: the BLAS probe, the memory budget, and greedy outputs equal to quantized."""

from __future__ import annotations

import ctypes.util
import sys

import pytest
from mlx_lm.generate import generate_step

from inference.engine import GenerationRequest, load_model
from inference.engine.acceleration import cpu_fast_path
from inference.engine.acceleration.dense_weights import (
    FastPathOptions,
    apply_fast_path,
    dequantize_model,
    quantized_layers,
)

from .helpers import chat_tokens, generate

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three colors.",
]


@pytest.fixture(scope="module")
def quantized(model_folder):
    """The default model as shipped: 4-bit layers, 8-bit embedding, no fast path."""
    return load_model(model_folder, fast_path=FastPathOptions(enabled=False))


@pytest.fixture(scope="module")
def dense(model_folder):
    """The default model on the dense float32 path (the default is the quantized kernel)."""
    return load_model(model_folder, fast_path=FastPathOptions(weights="dense"))


def test_the_default_model_runs_on_the_dense_path_when_asked(dense):
    report = dense.fast_path
    assert cpu_fast_path.blas_state().loaded, cpu_fast_path.blas_state().reason
    assert report.path == "fast", report.reason
    assert report.blas and report.layers_dequantized > 200
    assert report.dense_weight_bytes > 500_000_000  # 135M parameters in float32
    assert quantized_layers(dense.model) == []


def test_greedy_output_equals_the_quantized_path(engine, dense, quantized):
    for text in PROMPTS:
        prompt = chat_tokens(engine, text)
        expected = _greedy_tokens(quantized, prompt, 12)
        assert _greedy_tokens(dense, prompt, 12) == expected, text
        run = generate(engine, GenerationRequest(prompt, max_tokens=12))  # the engine's path
        assert run.text == quantized.tokenizer.decode(expected), text


def _greedy_tokens(loaded, prompt: list[int], count: int) -> list[int]:
    import mlx.core as mx

    tokens = []
    for token, _ in generate_step(mx.array(prompt), loaded.model, max_tokens=count):
        if token in loaded.tokenizer.eos_token_ids:
            break
        tokens.append(int(token))
    return tokens


def test_turned_off_or_over_budget_stays_quantized(quantized):
    off = apply_fast_path(quantized.model, FastPathOptions(enabled=False))
    assert off.path == "quantized" and "MLXLAB_CPU_FAST_PATH=0" in off.reason
    budget = FastPathOptions(weights="dense", dense_weight_budget_bytes=1 << 20)
    tight = apply_fast_path(quantized.model, budget)
    assert tight.path == "quantized" and "over the budget" in tight.reason
    assert tight.dense_weight_bytes == 0
    assert len(quantized_layers(quantized.model)) > 200  # untouched


def test_a_model_without_quantized_layers_is_already_dense(model_folder):
    loaded = load_model(model_folder, fast_path=FastPathOptions(enabled=False))
    assert dequantize_model(loaded.model) > 200
    report = apply_fast_path(loaded.model, FastPathOptions())
    assert report.path == "dense" and "no quantized layers" in report.reason


def test_the_probe_accepts_the_candidate_that_was_loaded():
    state = cpu_fast_path.blas_state()
    candidates = cpu_fast_path.blas_candidates()
    assert state.path in candidates


def test_the_probe_rejects_a_library_without_cblas():
    libm = ctypes.util.find_library("m") or "libm.so.6"
    reason = cpu_fast_path.probe_blas(libm)
    assert reason is not None and "cblas_sgemm" in reason


def test_the_probe_rejects_a_file_that_is_no_library(tmp_path):
    fake = tmp_path / "libopenblas.so.0"
    fake.write_text("not a library")
    reason = cpu_fast_path.probe_blas(str(fake))
    assert reason is not None and "failed" in reason


def test_a_blas_that_kills_its_process_is_reported_not_fatal(monkeypatch):
    # What a build for the wrong CPU does: "Illegal instruction" (SIGILL).
    monkeypatch.setattr(cpu_fast_path, "PROBE", "import os, signal; os.kill(os.getpid(), 4)")
    assert cpu_fast_path.probe_blas("unused") == "the probe was killed by signal 4"


def test_too_late_once_mlx_is_imported(monkeypatch):
    assert "mlx.core" in sys.modules
    monkeypatch.setattr(cpu_fast_path, "_state", None)
    state = cpu_fast_path.load_blas()
    assert not state.loaded and "imported before" in state.reason
