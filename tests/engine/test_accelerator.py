"""Warm-up before ready, the compiled-kernel cache, and rows that share a sampler."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import mlx.core as mx
import pytest

from inference.engine import Engine, EngineConfig, load_model
from inference.engine.acceleration.accelerator import (
    PTX_CACHE_VARIABLE,
    WarmUpShapes,
    kernel_cache_folder,
    use_kernel_cache,
)
from inference.engine.loop.sampling import MAX_SHARED_SAMPLERS, RowSamplers
from inference.protocol.sampling import SamplingParams

from .helpers import generate
from .test_engine import greedy


@pytest.mark.parametrize(
    "largest, sizes",
    [(1, [1]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8]), (64, [1, 2, 4, 8, 16, 32, 64])],
)
def test_warm_up_covers_powers_of_two_and_the_largest_batch(largest, sizes):
    assert WarmUpShapes(largest, 4, 512).batch_sizes() == sizes


def test_a_warmed_up_engine_answers_as_a_cold_one_and_counts_nothing(engine, model_folder):
    config = EngineConfig(max_batch_size=4, prefill_step_size=16, warm_up=True)
    warmed = Engine(lambda: load_model(model_folder), config=config).start()
    try:
        stats = warmed.stats
        assert stats.warm_up_seconds > 0
        assert (stats.requests_completed, stats.generated_tokens, stats.prompt_tokens) == (0, 0, 0)
        assert warmed.prompt_cache.stats().entries == 0  # warm-up prompts are not cached
        request = greedy(engine, "What is the capital of France?", 8)
        assert generate(warmed, request).text == generate(engine, request).text
        assert warmed.stats.requests_completed == 1
    finally:
        warmed.shutdown()


def test_the_cpu_warms_up_only_when_asked(engine):
    assert EngineConfig().warm_up is None  # auto
    assert engine.stats.warm_up_seconds == 0


def test_a_gpu_prefills_a_whole_batch_together_and_the_cpu_four_prompts():
    config = EngineConfig(max_batch_size=32)
    assert config.prefill_batch_size is None  # left to the device
    assert config.for_device(gpu=True).prefill_batch_size == 32
    assert config.for_device(gpu=False).prefill_batch_size == 4
    assert EngineConfig(max_batch_size=2).for_device(gpu=False).prefill_batch_size == 4


def test_an_explicit_prefill_batch_size_wins_on_either_device():
    config = EngineConfig(max_batch_size=32, prefill_batch_size=8)
    assert config.for_device(gpu=True).prefill_batch_size == 8
    assert config.for_device(gpu=False).prefill_batch_size == 8
    with pytest.raises(ValueError):
        EngineConfig(prefill_batch_size=0)


def test_the_engine_chooses_its_prefill_batch_for_its_device(engine):
    assert engine.config.max_batch_size == 8
    assert engine.config.prefill_batch_size == 4  # the CPU's
    assert engine.runner.config.prefill_batch_size == 4


def test_the_kernel_cache_is_left_alone_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.delenv(PTX_CACHE_VARIABLE, raising=False)
    assert use_kernel_cache(tmp_path) is None
    assert PTX_CACHE_VARIABLE not in os.environ
    assert not any(tmp_path.iterdir())


def test_an_operators_kernel_cache_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(PTX_CACHE_VARIABLE, str(tmp_path / "mine"))
    assert use_kernel_cache(tmp_path / "lab") == tmp_path / "mine"
    assert os.environ[PTX_CACHE_VARIABLE] == str(tmp_path / "mine")


def test_the_prebuilt_kernels_go_where_mlx_reads_them(tmp_path, monkeypatch):
    monkeypatch.delenv(PTX_CACHE_VARIABLE, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what TMPDIR sets
    assert kernel_cache_folder() == tmp_path / "mlx" / mx.__version__ / "ptx"  # MLX's default
    monkeypatch.setenv(PTX_CACHE_VARIABLE, str(tmp_path / "kept"))
    assert kernel_cache_folder() == tmp_path / "kept"


@pytest.mark.skipif(
    mx.default_device() != mx.gpu, reason="needs MLX's CUDA backend (no GPU on this machine)"
)
def test_the_kernel_cache_goes_under_the_lab_on_a_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv(PTX_CACHE_VARIABLE, raising=False)
    folder = use_kernel_cache(tmp_path)
    assert folder.is_dir() and Path(os.environ[PTX_CACHE_VARIABLE]) == folder
    assert folder.parent.name == mx.__version__


def test_rows_that_sample_alike_share_one_sampler():
    samplers = RowSamplers(xtc_special_tokens=[0])
    warm = SamplingParams(temperature=0.7, top_p=0.9)
    first = samplers.for_row(warm, sequence=None)
    assert samplers.for_row(SamplingParams(temperature=0.7, top_p=0.9), sequence=None) is first
    assert samplers.for_row(SamplingParams(temperature=0.8, top_p=0.9), sequence=None) is not first
    assert samplers.for_row(SamplingParams(), sequence=None) is None  # greedy: the batch's own
    seeded = SamplingParams(temperature=0.7, top_p=0.9, seed=1)
    assert samplers.for_row(seeded, sequence=None) is not samplers.for_row(seeded, sequence=None)
    for step in range(100):  # client-chosen settings never grow the shared set unbounded
        samplers.for_row(SamplingParams(temperature=0.5 + step / 1000), sequence=None)
    assert len(samplers._shared) <= MAX_SHARED_SAMPLERS


def test_a_gpus_warm_up_builds_the_matmul_kernels_beside_its_first_rounds(
    engine, model_folder, tmp_path, monkeypatch
):
    # The GPU's order of work, run on the CPU: the children's matmuls there compile
    # nothing, but they run, and the warm-up waits for them and records what they built.
    from inference.engine.acceleration import accelerator
    from inference.engine.acceleration.dense_weights import FastPathOptions
    from inference.engine.acceleration.kernel_prebuild import MANIFEST

    monkeypatch.setattr(accelerator, "on_gpu", lambda: True)
    monkeypatch.setenv(PTX_CACHE_VARIABLE, str(tmp_path))
    config = EngineConfig(
        max_batch_size=2, prefill_batch_size=1, prefill_step_size=16, warm_up=True
    )
    quantized = FastPathOptions(enabled=False)  # the quantized layers a GPU keeps
    warmed = Engine(lambda: load_model(model_folder, fast_path=quantized), config=config).start()
    try:
        built = json.loads((tmp_path / MANIFEST).read_text())
        # Rows up to 16 a prefill chunk: the 16-row tile of both 4-bit paths (the 8-bit head
        # sees at most 2 rows, the vector kernel's).
        assert sorted(built) == [
            "float16-b4-g32-affine-m16-naive-r0",
            "float16-b4-g32-affine-m16-tc",
        ]
        assert [path.name for path in tmp_path.iterdir()] == [MANIFEST]  # no scratch left
        request = greedy(engine, "What is the capital of France?", 8)
        assert generate(warmed, request).text == generate(engine, request).text
    finally:
        warmed.shutdown()
