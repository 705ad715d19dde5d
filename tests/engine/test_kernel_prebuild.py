"""Quantized matmul kernels built in parallel processes before the warm-up."""

from __future__ import annotations

import json
import os
import time

import mlx.core as mx
import pytest
from mlx_lm import load

from inference.engine.acceleration.kernel_prebuild import (
    MANIFEST,
    TIMEOUT_S,
    MatmulJob,
    adopt,
    model_jobs,
    prebuild,
    row_tiles,
)

on_gpu = mx.default_device().type == mx.DeviceType.gpu


@pytest.mark.parametrize(
    "rows, tiles",
    [
        (1, []),
        (7, []),
        (8, [16]),
        (16, [16]),
        (17, [16, 32]),
        (33, [16, 32, 64]),
        (4096, [16, 32, 64]),
    ],
)
def test_rows_below_eight_take_the_vector_kernel_and_the_rest_a_tile_of_up_to_64(rows, tiles):
    assert row_tiles(rows) == tiles


@pytest.fixture(scope="module")
def quantized_model(model_folder):
    model, _ = load(str(model_folder))  # mlx-lm keeps the weights quantized, as a GPU does
    return model


def test_the_default_model_needs_the_seven_kernels_an_h200_compiled(quantized_model):
    jobs = model_jobs(quantized_model, max_rows=8 * 512, max_batch=8)
    # 4-bit layers: gate/up suit the tensor cores, q/k/v/o/down (N of 576 or 192) do not;
    # the tied 8-bit embedding is the head, one row a sequence (docs/BENCHMARKS.md).
    assert sorted(job.key() for job in jobs) == sorted(
        [f"float16-b4-g32-affine-m{tile}-{path}" for tile in (16, 32, 64)
         for path in ("tc", "naive-r0")] + ["float16-b8-g32-affine-m16-tc"]
    )  # fmt: skip
    head = next(job for job in jobs if job.bits == 8)
    assert (head.inputs, head.outputs) == (576, 49152)


def test_a_larger_batch_needs_the_head_at_a_larger_tile(quantized_model):
    keys = {job.key() for job in model_jobs(quantized_model, max_rows=4096, max_batch=32)}
    assert "float16-b8-g32-affine-m32-tc" in keys
    assert "float16-b8-g32-affine-m64-tc" not in keys


def test_a_built_module_moves_in_whole_and_a_cached_one_stays(tmp_path):
    built, cache = tmp_path / "built", tmp_path / "cache"
    built.mkdir(), cache.mkdir()
    for name in ("new.ptx", "new.txt", "new.cu", "old.ptx", "old.txt"):
        (built / name).write_text(f"built {name}")
    (cache / "old.ptx").write_text("cached")
    assert adopt(built, cache) == 1
    assert sorted(path.name for path in cache.iterdir()) == [
        "new.cu",
        "new.ptx",
        "new.txt",
        "old.ptx",
    ]
    assert (cache / "new.txt").read_text() == "built new.txt"
    assert (cache / "old.ptx").read_text() == "cached"


def job(**changes) -> MatmulJob:
    fields = dict(
        inputs=256, outputs=128, bits=4, group_size=64, mode="affine", dtype="float16", tile=16
    )
    return MatmulJob(**{**fields, **changes})


def test_kernels_are_built_once_per_cache_and_a_failed_one_is_left_to_the_warm_up(tmp_path):
    good, larger, bad = job(), job(tile=32), job(group_size=48)  # no kernel has groups of 48
    assert prebuild([good, larger, bad], tmp_path, processes=3) == [good.key(), larger.key()]
    assert sorted(json.loads((tmp_path / MANIFEST).read_text())) == sorted(
        [good.key(), larger.key()]
    )
    assert prebuild([good, larger], tmp_path) == []  # nothing left to build: no process starts
    assert [path.name for path in tmp_path.iterdir()] == [MANIFEST]  # scratch folders gone


@pytest.mark.skipif(not on_gpu, reason="only a GPU compiles kernels at run time")
def test_a_gpu_build_leaves_the_modules_in_the_cache(tmp_path):
    prebuild([job(), job(tile=32)], tmp_path, processes=2)
    modules = sorted(path.stem for path in tmp_path.glob("*.ptx"))
    assert len(modules) == 2 and all("qmm" in name for name in modules)


def test_a_killed_builds_scratch_folder_goes_and_a_running_ones_stays(tmp_path):
    stale, running = tmp_path / ".prebuild-stale", tmp_path / ".prebuild-running"
    for folder in (stale, running):
        folder.mkdir()
        (folder / "half.ptx").write_text("half")
    os.utime(stale, (time.time() - 3 * TIMEOUT_S,) * 2)
    prebuild([], tmp_path)
    assert not stale.exists() and (running / "half.ptx").exists()
