"""The engine: one thread owns MLX and runs a continuous batch for one loaded model.

One step is three calls, as in nano-vllm: schedule (scheduler.py, no tensors), run the
batch and postprocess its tokens (runner.py). Requests arrive through the scheduler's
queue from any thread; events leave through each request's `emit`, on the engine thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import mlx.core as mx

from ...protocol.events import Event
from ..acceleration.accelerator import WarmUpShapes, on_gpu, warm_up
from ..acceleration.loader import LoadedModel
from ..caching.disk_writer import DiskWriter
from ..caching.prompt_cache import PromptCache
from ..prompting.request import GenerationRequest
from .batch_caches import prefills_alone, unbatchable
from .config import EngineConfig, EngineStats
from .freed_memory import release_freed_memory
from .generator import Generator
from .runner import Runner
from .scheduler import Scheduler

log = logging.getLogger(__name__)


def _wait_for_os_thread(native_id: int | None, timeout: float) -> None:
    """Wait until the OS thread `native_id` is gone (Linux; elsewhere, no wait).

    join() returns once the thread's Python code is done, but the OS thread then still runs
    its C++ thread-local destructors, and one in MLX's Python module takes the GIL: when the
    interpreter finalizes meanwhile, the thread is stopped inside that destructor and the
    process aborts ("terminate called without an active exception", exit status 134), as a
    script that shut an engine down after a few long prompts and exited did.
    """
    task = f"/proc/self/task/{native_id}"
    deadline = time.monotonic() + timeout
    while native_id is not None and os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(0.005)


class Engine:
    """Continuous batching over mlx-lm's BatchGenerator for one loaded model."""

    def __init__(self, loader: Callable[[], LoadedModel], *, config: EngineConfig | None = None):
        """Prepare an engine; `start` runs `loader` on the engine thread itself.

        Loading there keeps every MLX array of the model on the thread that uses it.
        """
        self._loader = loader
        self.loaded: LoadedModel | None = None
        self.config = (config or EngineConfig()).for_device(on_gpu())
        self.stats = EngineStats()
        self.scheduler = Scheduler()
        self.runner: Runner | None = None
        self.unbatchable: str | None = None  # why rows cannot share a batch (batch_caches.py)
        self.prefills_alone: str | None = None  # why prompts prefill one at a time
        self.writer: DiskWriter | None = None  # the disk tier's and checkpoints' writes
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlx-engine", daemon=True)

    # -- public API, callable from any thread ---------------------------------

    def start(self, timeout: float | None = None) -> Engine:
        """Start the thread and wait until the model is loaded (or raise why not)."""
        self._thread.start()
        self._ready.wait(timeout)
        if self._load_error is not None:
            raise self._load_error
        if not self._ready.is_set():
            raise TimeoutError("the model did not load and warm up in time")
        return self

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def context_length(self) -> int:
        return self.loaded.context_length

    @property
    def vocab_size(self) -> int:
        return self.loaded.vocab_size

    @property
    def prompt_cache(self) -> PromptCache | None:
        return self.runner.prompt_cache if self.runner is not None else None

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet finished, failed or cancelled."""
        return self.scheduler.in_flight

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, request: GenerationRequest, emit: Callable[[Event], None]) -> int:
        """Queue a request; `emit` receives its events on the engine thread."""
        return self.scheduler.submit(request, emit)

    def submit_many(
        self, calls: list[tuple[GenerationRequest, Callable[[Event], None]]]
    ) -> list[int]:
        """Queue requests to be admitted together: equal prompts among them prefill once."""
        return self.scheduler.submit_many(calls)

    def cancel(self, request_id: int) -> None:
        """Drop a request at the next step and free its slot; no more events."""
        self.scheduler.cancel(request_id)

    def between_steps(self, function: Callable[[Runner], None]) -> None:
        """Run `function(runner)` on the engine thread between two steps (scheduler.call)."""
        self.scheduler.call(function)

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self.scheduler.wake()
        self._thread.join(timeout)
        _wait_for_os_thread(self._thread.native_id, timeout=2.0)

    # -- the engine thread ----------------------------------------------------

    def _run(self) -> None:
        try:
            if self._load():
                stream = mx.new_stream(mx.default_device())
                with mx.stream(stream):
                    self._warm_up(stream)
                    release_freed_memory()  # what loading and warming up left behind
                    self._ready.set()
                    self._serve(stream)
        finally:
            # The global random key may be a lazy array made on this thread; left
            # unevaluated it aborts the interpreter at exit once the thread is gone.
            mx.eval(mx.random.state)
            if self.runner is not None:
                self.runner.prompt_cache.hand_over()
            if self.writer is not None:  # what is queued reaches the disk first
                self.writer.close()
            if self.runner is not None:  # free its MLX arrays on the thread that made them
                self.runner.prompt_cache.clear()

    def _load(self) -> bool:
        try:
            self.loaded = self._loader()
            self.unbatchable = unbatchable(self.loaded.model)
            self.prefills_alone = prefills_alone(self.loaded.model)
            if self.unbatchable is not None:
                log.info("%s", self.unbatchable)
                self.config = replace(self.config, max_batch_size=1, prefill_batch_size=1)
            elif self.prefills_alone is not None:
                log.info("%s", self.prefills_alone)
                self.config = replace(self.config, prefill_batch_size=1)
            self.writer = DiskWriter()
            self.runner = Runner(self.loaded, self.config, self.stats, self.writer)
        except BaseException as exc:
            self._load_error = exc
            self._ready.set()
            return False
        return True

    def _warm_up(self, stream) -> None:
        """Compile the serving shapes' kernels before ready, so no user request waits on them."""
        wanted = self.config.warm_up
        if not (on_gpu() if wanted is None else wanted):
            return
        shapes = WarmUpShapes(
            self.config.max_batch_size,
            self.config.prefill_batch_size,
            self.config.prefill_step_size,
        )
        try:
            generator = Generator(
                self.loaded.model,
                completion_batch_size=shapes.max_batch_size,
                prefill_batch_size=shapes.prefill_batch_size,
                prefill_step_size=shapes.prefill_step_size,
                stream=stream,
            )
            self.stats.warm_up_seconds = warm_up(
                generator, shapes, vocab_size=self.loaded.vocab_size
            )
        except Exception:  # a slow first request is better than no worker at all
            log.exception("warming up failed; serving without it")

    def _serve(self, stream) -> None:
        scheduler, runner = self.scheduler, self.runner
        runner.start(stream)
        while not self._stopping.is_set():
            plan = scheduler.schedule(runner.size)
            self.stats.requests_cancelled += plan.dropped
            ended = runner.apply(plan)
            stepped = runner.size > 0
            if stepped:
                ended += runner.step()
            scheduler.ended(ended)
            if not runner.size:  # nothing left to overlap the disk tier's copies
                runner.prompt_cache.hand_over()
            if stepped and not runner.size:  # the batch emptied: what it freed goes back
                release_freed_memory(mlx_cache=not on_gpu())
        scheduler.ended(runner.fail_all("the engine is shutting down"))
