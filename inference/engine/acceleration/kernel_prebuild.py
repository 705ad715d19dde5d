"""Build a quantized model's matmul kernels in parallel processes before the warm-up.

MLX's CUDA backend compiles a quantized matmul kernel with NVRTC the first time a
shape needs one, one after another: the default model's seven took 40-60 s each, five
minutes of a fresh H200's warm-up. A kernel depends on the activation dtype, bits,
group size, mode, its row tile (16, 32 or 64 rows) and whether the weight's shape suits
the tensor-core path, never on the weights. So one process per kernel multiplies zeros
of that shape, all at once, each into a folder of its own; the modules they built then
move into the shared cache file by file by rename, the .ptx last, because MLX takes a
module whose .ptx it finds as complete and writes its cache files in place.

Run as a script, this file is that child process: `python -P kernel_prebuild.py JOBS`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx

log = logging.getLogger(__name__)

MANIFEST = "prebuilt.json"  # the kernels already built into a cache folder, by key
ROW_TILES = (16, 32, 64)  # MLX's row tiles: the next power of two of the rows, clamped
QMV_ROWS = 8  # fewer rows than this take MLX's matrix-vector kernel, built ahead of time
MAX_PROCESSES = 16
TIMEOUT_S = 900.0
SCRATCH_PREFIX = ".prebuild-"  # the children's own folders, inside the cache's file system


@dataclass(frozen=True)
class MatmulJob:
    """One quantized matmul kernel to build: a weight's shape and a row tile."""

    inputs: int  # K
    outputs: int  # N
    bits: int
    group_size: int
    mode: str
    dtype: str  # of the activations, which is the scales' for affine quantization
    tile: int

    def key(self) -> str:
        """What MLX names the kernel by: the same key, the same compiled module.

        The tensor-core path needs N a multiple of 128 and K of the K tile; otherwise
        the other path also tells apart a K that leaves a residue.
        """
        k_tile = max(64, self.group_size)
        tensor_cores = self.outputs % 128 == 0 and self.inputs % k_tile == 0
        path = "tc" if tensor_cores else f"naive-r{int(self.inputs % k_tile != 0)}"
        return f"{self.dtype}-b{self.bits}-g{self.group_size}-{self.mode}-m{self.tile}-{path}"


def row_tiles(max_rows: int) -> list[int]:
    """The row tiles a matmul of up to `max_rows` rows meets; none below MLX's QMV rows."""
    if max_rows < QMV_ROWS:
        return []
    top = min(ROW_TILES[-1], max(ROW_TILES[0], 1 << (max_rows - 1).bit_length()))
    return [tile for tile in ROW_TILES if tile <= top]


def model_jobs(model, *, max_rows: int, max_batch: int) -> list[MatmulJob]:
    """One job per distinct kernel the model's quantized layers can need.

    Linear layers see up to `max_rows` rows (a prefill chunk); a quantized embedding
    works as the output head of a tied model, which sees one row per sequence, so at
    most `max_batch` (a prefill evaluates the head on its last position only).
    """
    import mlx.nn as nn

    jobs: dict[str, MatmulJob] = {}
    for _, module in model.named_modules():
        if isinstance(module, nn.QuantizedLinear):
            rows = max_rows
        elif isinstance(module, nn.QuantizedEmbedding):
            rows = max_batch
        else:
            continue
        mode = getattr(module, "mode", "affine")
        if mode != "affine":  # the other modes' activation dtype is not the scales'
            continue
        outputs, packed = module.weight.shape[-2:]
        dtype = str(module.scales.dtype).rsplit(".", 1)[-1]
        for tile in row_tiles(rows):
            job = MatmulJob(packed * 32 // module.bits, outputs, module.bits,
                            module.group_size, mode, dtype, tile)  # fmt: skip
            jobs.setdefault(job.key(), job)
    return list(jobs.values())


def prebuild(jobs: list[MatmulJob], cache: Path, *, processes: int | None = None) -> list[str]:
    """Build the jobs' kernels into `cache`, those not built there before; the keys built.

    A job whose process fails is left to the warm-up, which compiles it as before.
    """
    return start(jobs, cache, processes=processes).finish()


def start(jobs: list[MatmulJob], cache: Path, *, processes: int | None = None) -> Build:
    """Start building the jobs' kernels not built in `cache` before; `finish()` waits."""
    _clear_stale_scratch(cache)
    done = _manifest(cache)
    todo = [job for job in jobs if job.key() not in done]
    count = min(len(todo), processes or max(1, (os.cpu_count() or 2) - 1), MAX_PROCESSES)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=cache)) if todo else None
    children = [_start(todo[index::count], scratch / str(index)) for index in range(count)]
    return Build(cache, done, children, time.perf_counter())


@dataclass
class Build:
    """Kernel builds under way in child processes."""

    cache: Path
    done: set[str]
    children: list[_Child]
    started: float

    def finish(self) -> list[str]:
        """Wait for every child, move in what each built; the keys built."""
        children, self.children = self.children, []  # a second call has nothing to wait for
        if not children:
            return []
        built = [key for child in children for key in _finish(child, self.cache)]
        shutil.rmtree(children[0].folder.parent, ignore_errors=True)
        _record(self.cache, self.done | set(built))
        log.info("built %s quantized matmul kernels in %s processes in %.1f s",
                 len(built), len(children), time.perf_counter() - self.started)  # fmt: skip
        return built


def adopt(folder: Path, cache: Path) -> int:
    """Move the modules a child built in `folder` into `cache`; how many moved.

    A module the cache has already stays as it is.
    """
    moved = 0
    for ptx in sorted(folder.glob("*.ptx")):
        if (cache / ptx.name).exists():
            continue
        for part in sorted(folder.glob(f"{ptx.stem}.*"), key=lambda p: p.suffix == ".ptx"):
            os.replace(part, cache / part.name)
        moved += 1
    return moved


@dataclass
class _Child:
    process: subprocess.Popen
    folder: Path
    jobs: list[MatmulJob]


def _start(jobs: list[MatmulJob], folder: Path) -> _Child:
    folder.mkdir(parents=True)
    env = {**os.environ, "MLX_PTX_CACHE_DIR": str(folder)}
    payload = json.dumps([asdict(job) for job in jobs])
    # -P: this file's folder (the engine's modules) must not shadow the standard library.
    command = [sys.executable, "-P", __file__, payload]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return _Child(process, folder, jobs)


def _finish(child: _Child, cache: Path) -> list[str]:
    try:
        _, errors = child.process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.process.kill()
        child.process.communicate()
        log.warning("building kernels took over %.0f s; left to the warm-up", TIMEOUT_S)
        return []
    adopt(child.folder, cache)
    if child.process.returncode != 0:
        log.warning("building kernels failed: %s", errors.decode(errors="replace")[-2000:])
        return []
    return [job.key() for job in child.jobs]


def _clear_stale_scratch(cache: Path) -> None:
    """Remove the scratch folders of a worker killed while building: no build lasts longer."""
    for folder in cache.glob(f"{SCRATCH_PREFIX}*"):
        with contextlib.suppress(OSError):
            if time.time() - folder.stat().st_mtime > 2 * TIMEOUT_S:
                shutil.rmtree(folder, ignore_errors=True)


def _manifest(cache: Path) -> set[str]:
    try:
        return set(json.loads((cache / MANIFEST).read_text()))
    except (OSError, ValueError):
        return set()


def _record(cache: Path, keys: set[str]) -> None:
    scratch = cache / f".{MANIFEST}.{os.getpid()}"
    scratch.write_text(json.dumps(sorted(keys)))
    os.replace(scratch, cache / MANIFEST)


def build(job: MatmulJob) -> None:
    """Run one quantized matmul of the job's shape: MLX compiles its kernel on the way."""
    dtype = getattr(mx, job.dtype)
    groups = job.inputs // job.group_size
    x = mx.zeros((job.tile, job.inputs), dtype=dtype)
    weight = mx.zeros((job.outputs, job.inputs * job.bits // 32), dtype=mx.uint32)
    scales = mx.ones((job.outputs, groups), dtype=dtype)
    biases = mx.zeros((job.outputs, groups), dtype=dtype)
    out = mx.quantized_matmul(x, weight, scales, biases, transpose=True,
                              group_size=job.group_size, bits=job.bits, mode=job.mode)  # fmt: skip
    mx.eval(out)


if __name__ == "__main__":
    for fields in json.loads(sys.argv[1]):
        build(MatmulJob(**fields))
