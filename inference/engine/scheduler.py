"""The engine: one thread owns MLX and runs a continuous batch.

Requests arrive through a queue from any thread; events leave through each
request's `emit` callback, called on the engine thread. One step is three
calls, as in nano-vllm: admit (schedule), run the batch, postprocess.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, StopSequences
from mlx_lm.sample_utils import greedy_sampler

from .adapters import activate, adapter_key, load_adapter
from .grammar import GrammarProcessor
from .loader import LoadedModel
from .prompt_cache import PromptCache, PromptCacheConfig
from .request import Event, Failed, GenerationRequest
from .sampling import build_logits_processors, build_sampler
from .sequence import Sequence

log = logging.getLogger(__name__)


def guarded(function: Callable, sequence: Sequence, *, fallback: Callable) -> Callable:
    """Run one request's sampler or logits processor inside the shared batch step.

    A failure is recorded on its own sequence (failed at postprocess) and the
    fallback keeps the step going, so the other rows of the batch never see it.
    """

    def call(*args):
        if sequence.error is None:
            try:
                return function(*args)
            except Exception as exc:
                sequence.error = exc
        return fallback(*args)

    return call


def _unchanged(tokens, logits):
    return logits


@dataclass(frozen=True)
class EngineConfig:
    """Knobs of one engine; defaults suit a small CPU machine."""

    max_batch_size: int = 8
    prefill_batch_size: int = 4
    prefill_step_size: int = 512
    prompt_cache: PromptCacheConfig = field(default_factory=PromptCacheConfig)

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.prefill_batch_size < 1:
            raise ValueError("batch sizes must be at least 1")
        if self.prefill_step_size < 1:
            raise ValueError("prefill_step_size must be at least 1")


@dataclass
class EngineStats:
    requests_completed: int = 0
    requests_failed: int = 0
    requests_cancelled: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    decode_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds else 0.0


class Engine:
    """Continuous batching over mlx-lm's BatchGenerator for one loaded model."""

    def __init__(self, loader: Callable[[], LoadedModel], *, config: EngineConfig | None = None):
        """Prepare an engine; `start` runs `loader` on the engine thread itself.

        Loading there keeps every MLX array of the model on the thread that uses it.
        """
        self._loader = loader
        self.loaded: LoadedModel | None = None
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self.config = config or EngineConfig()
        self.stats = EngineStats()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count(1)
        self._active: dict[int, Sequence] = {}  # BatchGenerator uid -> sequence
        self._uid_of: dict[int, int] = {}  # request id -> uid
        self._in_flight = 0
        self._count_lock = threading.Lock()  # in_flight moves on two threads
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlx-engine", daemon=True)
        self._generator: BatchGenerator | None = None
        self.prompt_cache: PromptCache | None = None  # made once the tokenizer is loaded
        # Adapters: one set is active for the whole batch; requests for another set
        # wait (in order) until the batch drains, then the engine switches.
        self._adapter_key: tuple[str, ...] = ()
        self._adapters_loaded: set[str] = set()
        self._parked: collections.deque = collections.deque()

    # -- public API, callable from any thread ---------------------------------

    def start(self, timeout: float | None = None) -> Engine:
        """Start the thread and wait until the model is loaded (or raise why not)."""
        self._thread.start()
        self._ready.wait(timeout)
        if self._load_error is not None:
            raise self._load_error
        if self.loaded is None:
            raise TimeoutError("the model did not load in time")
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

    def shutdown(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._inbox.put(("wake", None))
        self._thread.join(timeout)

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet finished, failed or cancelled."""
        return self._in_flight

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, request: GenerationRequest, emit: Callable[[Event], None]) -> int:
        """Queue a request; `emit` receives its events on the engine thread."""
        request_id = next(self._ids)
        self._count(+1)
        self._inbox.put(("submit", (request_id, request, emit)))
        return request_id

    def cancel(self, request_id: int) -> None:
        """Drop a request at the next step and free its slot; no more events."""
        self._inbox.put(("cancel", request_id))

    # -- the engine thread ----------------------------------------------------

    def _run(self) -> None:
        try:
            if self._load():
                self._serve()
        finally:
            # The global random key may be a lazy array made on this thread; left
            # unevaluated it aborts the interpreter at exit once the thread is gone.
            mx.eval(mx.random.state)
            if self.prompt_cache is not None:  # free its MLX arrays on the thread that made them
                self.prompt_cache.clear()

    def _load(self) -> bool:
        try:
            self.loaded = self._loader()
            tokenizer = self.loaded.tokenizer
            self._stop_tokens = StopSequences([(t,) for t in tokenizer.eos_token_ids])
            # XTC must never cut the newline or end-of-sequence tokens (mlx_lm.server).
            self._xtc_special = tokenizer.encode("\n") + list(tokenizer.eos_token_ids)
            self.prompt_cache = PromptCache(
                self.config.prompt_cache, key=str(self.loaded.path), tokenizer=tokenizer
            )
        except BaseException as exc:
            self._load_error = exc
            return False
        finally:
            self._ready.set()
        return True

    def _serve(self) -> None:
        stream = mx.new_stream(mx.default_device())
        with mx.stream(stream):
            self._generator = self._new_generator(stream)
            while not self._stopping.is_set():
                self._admit(block=not self._active and not self._parked)
                if not self._active and self._parked:
                    self._unpark()
                if self._active:
                    self._step()
            for sequence in list(self._active.values()):
                self._fail(sequence, "the engine is shutting down")

    def _new_generator(self, stream) -> BatchGenerator:
        return BatchGenerator(
            self.loaded.model,
            stop_tokens=None,
            completion_batch_size=self.config.max_batch_size,
            prefill_batch_size=self.config.prefill_batch_size,
            prefill_step_size=self.config.prefill_step_size,
            stream=stream,
        )

    def _admit(self, *, block: bool) -> None:
        """Take every queued message; wait for one when the batch is empty."""
        try:
            message = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, payload = message
            if kind == "submit":
                self._accept(*payload)
            elif kind == "cancel":
                self._cancel(payload)
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _accept(self, request_id: int, request: GenerationRequest, emit) -> None:
        """Admit now, or park behind earlier requests for another adapter set."""
        key = adapter_key(request.adapters)
        if self._parked or (self._active and key != self._adapter_key):
            self._parked.append((request_id, request, emit))
            return
        if self._use_adapters(request, emit):
            self._insert(request_id, request, emit)

    def _unpark(self) -> None:
        """The batch has drained: switch to the oldest waiting set and admit its requests."""
        key = adapter_key(self._parked[0][1].adapters)
        waiting, self._parked = self._parked, collections.deque()
        for request_id, request, emit in waiting:
            if adapter_key(request.adapters) != key:
                self._parked.append((request_id, request, emit))
            elif self._use_adapters(request, emit):
                self._insert(request_id, request, emit)

    def _use_adapters(self, request: GenerationRequest, emit) -> bool:
        key = adapter_key(request.adapters)
        if key == self._adapter_key:
            return True
        try:
            for ref in request.adapters:
                if ref.name not in self._adapters_loaded:
                    load_adapter(self.loaded.model, ref)
                    self._adapters_loaded.add(ref.name)
        except Exception as exc:
            log.warning("adapter for request rejected: %s", exc)
            self._count(-1)
            self.stats.requests_failed += 1
            emit(Failed(str(exc)))
            return False
        activate(self.loaded.model, key)
        self._adapter_key = key
        # Caches made under other adapters must never be reused under these.
        self.prompt_cache.key = (str(self.loaded.path), *key)
        return True

    def _insert(self, request_id: int, request: GenerationRequest, emit) -> None:
        sequence = Sequence(request_id, request, emit, self.loaded.tokenizer)
        try:
            sampler = build_sampler(request.sampling, xtc_special_tokens=self._xtc_special)
            processors = build_logits_processors(request.sampling)
            if request.grammar is not None:  # last, so bias can't revive a masked token
                processors.append(GrammarProcessor(request.grammar))
            plan = self.prompt_cache.lookup(request.prompt_tokens)
            (uid,) = self._generator.insert_segments(
                [plan.segments],
                caches=[plan.cache],
                all_tokens=[request.prompt_tokens[: plan.cached_tokens]],
                max_tokens=[request.max_tokens],
                samplers=[guarded(sampler, sequence, fallback=greedy_sampler)],
                logits_processors=[[guarded(p, sequence, fallback=_unchanged) for p in processors]],
                stop_sequences=[self._stop_tokens],
            )
        except Exception as exc:  # a bad request fails alone
            log.warning("request %s rejected by the engine: %s", request_id, exc)
            self._count(-1)
            self.stats.requests_failed += 1
            emit(Failed(str(exc)))
            return
        self.prompt_cache.expect(uid, plan)
        sequence.cached_tokens = plan.cached_tokens
        self._active[uid] = sequence
        self._uid_of[request_id] = uid
        self.stats.prompt_tokens += len(request.prompt_tokens)

    def _cancel(self, request_id: int) -> None:
        for item in self._parked:
            if item[0] == request_id:
                self._parked.remove(item)
                self._count(-1)
                self.stats.requests_cancelled += 1
                return
        uid = self._uid_of.get(request_id)
        if uid is None or uid not in self._active:
            return  # already finished, or never admitted
        self._generator.remove([uid])
        self._release(uid)
        self.stats.requests_cancelled += 1

    def _step(self) -> None:
        started = time.perf_counter()
        try:
            prompt_responses, responses = self._generator.next()
            self.prompt_cache.save_boundaries(self._generator, prompt_responses)
        except Exception as exc:
            # The batch state is unknown after a failed step: fail its members,
            # start a fresh generator, keep serving.
            log.exception("engine step failed")
            for uid in list(self._active):
                self._fail(self._active[uid], f"generation failed: {exc}")
            self._generator = self._new_generator(self._generator.stream)
            return
        if responses:
            self.stats.decode_seconds += time.perf_counter() - started
            self.stats.generated_tokens += len(responses)
        self._postprocess(responses)

    def _postprocess(self, responses) -> None:
        for response in responses:
            sequence = self._active.get(response.uid)
            if sequence is None:
                continue
            if sequence.error is not None:
                self._fail(sequence, f"generation failed: {sequence.error}")
                continue
            if response.finish_reason is not None:  # stored before Finished goes out
                self.prompt_cache.save_finished(response)
            try:
                ended = sequence.on_token(response.token, response.logprobs, response.finish_reason)
            except Exception as exc:
                log.exception("postprocessing failed for request %s", sequence.request_id)
                self._fail(sequence, f"generation failed: {exc}")
                continue
            if ended:
                if response.finish_reason is None:  # a text stop the generator can't see
                    self._generator.remove([response.uid])
                self._release(response.uid)
                self.stats.requests_completed += 1

    def _fail(self, sequence: Sequence, message: str) -> None:
        uid = self._uid_of.get(sequence.request_id)
        if uid is None:
            return
        try:
            self._generator.remove([uid])
        except Exception:  # the generator may be the broken part
            log.debug("could not remove uid %s", uid, exc_info=True)
        self._release(uid)
        self.stats.requests_failed += 1
        sequence.emit(Failed(message))

    def _release(self, uid: int) -> None:
        sequence = self._active.pop(uid, None)
        if sequence is not None:
            self._uid_of.pop(sequence.request_id, None)
            self._count(-1)

    def _count(self, delta: int) -> None:
        with self._count_lock:
            self._in_flight += delta
