"""The GPU side of a worker: where compiled kernels live, and warming them before serving.

MLX's CUDA backend compiles kernels with NVRTC the first time it meets a graph
shape: a cold worker's first requests waited 16-98 s on an H200. It keeps
what it compiled under MLX_PTX_CACHE_DIR (by default /tmp/mlx/<version>/ptx,
lost with /tmp), so the lab points it at var/ and runs its serving shapes
once before it reports ready. On the CPU none of this applies.
"""

from __future__ import annotations

import logging
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

from .kernel_prebuild import QMV_ROWS, Build, model_jobs, start

log = logging.getLogger(__name__)

PTX_CACHE_VARIABLE = "MLX_PTX_CACHE_DIR"
WARM_UP_TOKENS = 3  # decode steps of a full batch: the first, and two from the steady loop


def on_gpu() -> bool:
    return mx.default_device().type == mx.DeviceType.gpu


def device_name() -> str:
    """The accelerator's name as MLX reports it ("cpu" on the CPU)."""
    if not on_gpu():
        return "cpu"
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    return str(info.get("device_name") or info.get("architecture") or "gpu")


def use_kernel_cache(base: Path) -> Path | None:
    """Point MLX's compiled-kernel cache at `base`/<mlx version>/<device>; the folder used.

    One folder per device kind: kernels built for one architecture must not be
    loaded on another. An operator's own MLX_PTX_CACHE_DIR wins. Only a GPU
    compiles kernels at run time, so on the CPU nothing is set.
    """
    if os.environ.get(PTX_CACHE_VARIABLE):
        return Path(os.environ[PTX_CACHE_VARIABLE])
    if not on_gpu():
        return None
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", device_name()).strip("-") or "gpu"
    folder = Path(base) / mx.__version__ / slug
    folder.mkdir(parents=True, exist_ok=True)
    # MLX reads the variable when it first compiles, not at import: setting it now is in time.
    os.environ[PTX_CACHE_VARIABLE] = str(folder)
    return folder


@dataclass(frozen=True)
class WarmUpShapes:
    """What a worker serves: the batch sizes it decodes and how it prefills."""

    max_batch_size: int
    prefill_batch_size: int
    prefill_step_size: int

    def batch_sizes(self) -> list[int]:
        """Powers of two up to the maximum, and the maximum itself."""
        sizes, size = [], 1
        while size < self.max_batch_size:
            sizes.append(size)
            size *= 2
        return [*sizes, self.max_batch_size]

    def prompt_lengths(self) -> list[list[int]]:
        """The prompts of each warm-up round, as token counts.

        Kernels are specialised on more than the batch size: an H200 still compiled
        for 30 s on a batch of 32-token prompts after a warm-up of short ones. So
        every batch size runs short and medium prompts, and the long prompts run
        a whole prefill chunk and a remainder, alone and two together. Prompts of
        one length decode without a mask (kv/rows.py), those of mixed lengths
        with one: each batch size runs both.
        """
        long = self.prefill_step_size + 7
        rounds = [[long], [long, long // 2][: self.prefill_batch_size]]
        for size in self.batch_sizes():
            rounds.append([3 + row % 6 for row in range(size)])
            rounds.append([24 + row % 17 for row in range(size)])
            if size > 1:
                rounds.append([24] * size)
        return rounds


def kernel_cache_folder() -> Path:
    """Where MLX keeps compiled kernels: the variable's folder, or MLX's own default."""
    configured = os.environ.get(PTX_CACHE_VARIABLE)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / "mlx" / mx.__version__ / "ptx"


def warm_up(generator, shapes: WarmUpShapes, *, vocab_size: int) -> float:
    """Run every serving shape once, greedy and sampled, so its kernels compile now.

    On a GPU the quantized matmul kernels, the slowest to compile, are built in parallel
    processes (kernel_prebuild.py) before the rounds that need them. `generator`: a
    throwaway one (loop/generator.py) of the serving shapes, on the engine's own stream: the runner's batch, prompt cache and
    statistics never see these requests. Decode steps of a loaded model's compiled MLP
    halves (compiled_mlp.py) trace here too, at every batch size. Returns the seconds spent.
    """
    started = time.perf_counter()
    model = generator.model
    draw = random.Random(0)
    sampled = make_sampler(0.7, top_p=0.95)
    builds = _start_kernel_builds(model, shapes) if on_gpu() else None
    try:
        if builds is not None:
            # Meanwhile one short prompt at a time, greedy then sampled: its matmuls take
            # MLX's ready-made vector kernels, and the other kernels it needs (gathers, the
            # sampler's, the MLP's element-wise ones) compile beside the builds.
            for sampler in (None, sampled):
                prompt = _prompt(draw, vocab_size, QMV_ROWS - 1)
                _drain(generator, [prompt], [sampler], WARM_UP_TOKENS)
            builds.finish()
        for lengths in shapes.prompt_lengths():
            prompts = [_prompt(draw, vocab_size, length) for length in lengths]
            # Mixed samplers take the per-row path, as a real mixed batch does.
            samplers = [None if row % 2 == 0 else sampled for row in range(len(prompts))]
            _drain(generator, prompts, samplers, _tokens(len(prompts), shapes))
    finally:
        if builds is not None:
            builds.finish()
        generator.close()
        del generator
        mx.clear_cache()
    seconds = time.perf_counter() - started
    log.info("warmed up %s batch shapes in %.1f s", len(shapes.prompt_lengths()), seconds)
    return seconds


def _start_kernel_builds(model, shapes: WarmUpShapes) -> Build:
    cache = kernel_cache_folder()
    cache.mkdir(parents=True, exist_ok=True)
    prefill_rows = shapes.prefill_step_size * shapes.prefill_batch_size
    jobs = model_jobs(
        model, max_rows=max(prefill_rows, shapes.max_batch_size), max_batch=shapes.max_batch_size
    )
    return start(jobs, cache)


def _tokens(rows: int, shapes: WarmUpShapes) -> int:
    """Tokens per row: enough that the first rows still decode when the last join.

    Rows join the decoding batch `prefill_batch_size` at a time, one join per step: with
    fewer tokens the first rows finished before the batch was full, and a served batch
    of that size would have compiled its kernels (and the compiled MLP half) on a request.
    """
    return WARM_UP_TOKENS + -(-rows // shapes.prefill_batch_size)


def _prompt(draw: random.Random, vocab_size: int, length: int) -> list[int]:
    return [draw.randrange(vocab_size) for _ in range(length)]


def _drain(generator, prompts: list[list[int]], samplers, tokens: int) -> None:
    uids = set(generator.insert(prompts, max_tokens=[tokens] * len(prompts), samplers=samplers))
    while uids:
        for response in generator.next_generated():
            if response.finish_reason is not None:
                uids.discard(response.uid)
