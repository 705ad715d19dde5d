"""The runner: owns one model's batch (generator.py, a lane per KV layout), its samplers, prompt
cache and adapters (adapter_set.py), and turns each step's tokens into events. Only the
engine thread calls it.
"""

from __future__ import annotations

import logging
import time

from mlx_lm.generate import StopSequences
from mlx_lm.models.cache import make_prompt_cache

from ...protocol.events import Failed
from ..acceleration.loader import LoadedModel
from ..caching.checkpoints import CheckpointStore
from ..caching.disk_writer import DiskWriter
from ..caching.identity import model_identity
from ..caching.prompt_cache import PromptCache
from ..media.rows import row_media
from ..prompting.grammar import GrammarProcessor
from ..prompting.token_history import history_for
from .adapter_set import AdapterSet
from .config import EngineConfig, EngineStats
from .generator import Generator
from .kv_lanes import Lanes
from .resuming import Resuming
from .sampling import RowSamplers, build_logits_processors, guarded, unchanged
from .scheduler import Pending, Plan
from .sequence import Sequence, step_logprobs
from .speculative import speculation_for

log = logging.getLogger(__name__)


class Runner:
    """Runs the batch; every method returns how many requests left it for good."""

    def __init__(
        self,
        loaded: LoadedModel,
        config: EngineConfig,
        stats: EngineStats,
        writer: DiskWriter | None = None,
    ) -> None:
        self.loaded = loaded
        self.config = config
        self.stats = stats
        tokenizer = loaded.tokenizer
        self._stop_tokens = StopSequences([(t,) for t in tokenizer.eos_token_ids])
        # XTC must never cut the newline or end-of-sequence tokens (mlx_lm.server).
        self._samplers = RowSamplers(tokenizer.encode("\n") + list(tokenizer.eos_token_ids))
        self.identity = model_identity(loaded)
        self.history = history_for(tokenizer)  # finished replies, for the next turns' prompts
        self.prompt_cache = PromptCache(
            config.prompt_cache,
            key=str(loaded.path),
            identity=self.identity,
            writer=writer,
        )
        self.checkpoints = (
            CheckpointStore(config.checkpoints, writer)
            if config.checkpoints.enabled and writer is not None
            else None
        )
        self._resuming = Resuming(self.checkpoints, config.checkpoints.every)
        self._lanes: Lanes | None = None
        self._active: dict[int, Sequence] = {}  # generator uid -> sequence
        self._uid_of: dict[int, int] = {}  # request id -> uid
        self.adapters = AdapterSet(loaded.model, self.prompt_cache)
        # leader uid -> requests for the same prompt, admitted once its prefill is cached
        self._followers: dict[int, list[Pending]] = {}
        self._logprob_uids: set[int] = set()  # rows whose steps keep logprobs (decoding.py)
        self.speculation = speculation_for(
            loaded, max_rows=config.max_verify_rows, exact=config.exact_verification
        )

    @property
    def size(self) -> int:
        return len(self._active) + sum(map(len, self._followers.values()))

    def start(self, stream) -> None:
        self._lanes = Lanes(
            lambda first_uid: self._new_generator(stream, first_uid),
            kv_layers=len(make_prompt_cache(self.loaded.model)),
        )

    def _new_generator(self, stream, first_uid: int) -> Generator:
        generator = Generator(
            self.loaded.model,
            speculation=self.speculation,
            logprob_uids=self._logprob_uids,
            completion_batch_size=self.config.max_batch_size,
            prefill_batch_size=self.config.prefill_batch_size,
            prefill_step_size=self.config.prefill_step_size,
            stream=stream,
            first_uid=first_uid,
        )
        # Finished prompt segments are stored before their rows move on (generator.py).
        generator.after_prefill = self.prompt_cache.save_boundaries
        return generator

    # -- the plan -------------------------------------------------------------------

    def apply(self, plan: Plan) -> int:
        """Run the plan's calls (between steps, never inside one), admit its requests under
        their adapter set, then drop the cancelled ones."""
        self.adapters.settle(busy=self.size > 0)  # the unmounts the last rows waited for
        for call in plan.calls:
            try:
                call(self)
            except Exception:  # a caller's bug must not stop the engine
                log.exception("a call on the engine thread failed")
        ended = 0
        if plan.admit and not self._use_adapters(plan):
            return len(plan.admit) + self._remove(plan.cancel)
        for leader, *rest in self._same_prompts(plan.admit):
            uid = self._insert(leader, share=bool(rest))
            if uid is not None and rest:
                self._followers[uid] = rest
            elif uid is None:
                ended += 1 + sum(self._insert(pending) is None for pending in rest)
        return ended + self._remove(plan.cancel)

    def _same_prompts(self, admitted: list[Pending]) -> list[list[Pending]]:
        """Admitted requests grouped by prompt (and cache scope), in order.

        One of a group computes the prompt; the others (OpenAI's `n`, or identical
        requests arriving together) start from its cached KV state: one prefill.
        """
        if not self.prompt_cache.config.enabled:
            return [[pending] for pending in admitted]
        groups: dict[tuple, list[Pending]] = {}
        for pending in admitted:
            request = pending.request
            key = (tuple(request.prefill_key), request.cache_scope, request.kv)
            groups.setdefault(key if len(key[0]) > 1 else (id(pending),), []).append(pending)
        return list(groups.values())

    def _admit_followers(self, uid: int) -> int:
        """Insert the requests waiting on `uid`'s prefill; how many of them failed."""
        return sum(self._insert(pending) is None for pending in self._followers.pop(uid, []))

    def _use_adapters(self, plan: Plan) -> bool:
        try:
            self.adapters.use(plan.admit[0].request.adapters)
        except Exception as exc:
            log.warning("adapter for request rejected: %s", exc)
            for pending in plan.admit:
                self.stats.requests_failed += 1
                pending.emit(Failed(str(exc)))
            return False
        return True

    def _insert(self, pending: Pending, *, share: bool = False) -> int | None:
        """The request's uid in the batch, or None (it failed, and was told so)."""
        request = pending.request
        sequence = Sequence(pending.request_id, request, pending.emit, self.loaded.tokenizer)
        # A resumed generation: its earlier tokens are prefilled after the prompt.
        replayed = request.resume.tokens if request.resume is not None else ()
        prompt = request.prefill_tokens
        try:
            sampler = self._samplers.for_row(request.sampling, sequence, step=len(replayed))
            grammar = None
            if request.grammar is not None:
                grammar = GrammarProcessor(request.grammar, replayed)
            processors = build_logits_processors(request.sampling, grammar)
            drafter = self.speculation.drafter_for(request, grammar)
            plan = self.prompt_cache.lookup(
                prompt,
                request.cache_scope,
                share=share,
                session=request.cache_session,
                kv=request.kv,
                boundary=request.cache_boundary,
                keys=request.prefill_key if request.media is not None else None,
            )
            lane, cache = self._lanes.lane_for(request.kv, plan.cache)
            # A media row's images run through the vision tower here, as it joins.
            media = row_media(self.loaded.model, prompt, request.media) if request.media else None
            uid = self._lanes.insert(
                lane,
                [plan.segments],
                [request.max_tokens - len(replayed)],
                caches=[cache],
                all_tokens=[prompt[: plan.cached_tokens]],
                samplers=[sampler],
                logits_processors=[[guarded(p, sequence, fallback=unchanged) for p in processors]],
                stop_sequences=[self._stop_tokens],
                media=[media],
            )
        except Exception as exc:  # a bad request fails alone
            log.warning("request %s rejected by the engine: %s", pending.request_id, exc)
            self.stats.requests_failed += 1
            pending.emit(Failed(str(exc)))
            return None
        self.prompt_cache.expect(uid, plan)
        sequence.cached_tokens = min(plan.cached_tokens, len(request.prompt_tokens))
        if drafter is not None:
            self.speculation.drafters[uid] = sequence.drafter = drafter
        self._active[uid] = sequence
        self._uid_of[pending.request_id] = uid
        if request.logprobs:
            self._logprob_uids.add(uid)
        self.stats.prompt_tokens += len(request.prompt_tokens)
        self._resuming.claim(sequence)
        try:
            sequence.replay(replayed)
        except Exception as exc:  # as a failed step would: this row alone
            log.exception("replaying request %s failed", pending.request_id)
            self._fail(sequence, f"generation failed: {exc}")
            return None
        return uid

    def _remove(self, request_ids: list[int]) -> int:
        removed = 0
        for request_id in request_ids:
            uid = self._uid_of.get(request_id)
            if uid is None or uid not in self._active:
                removed += self._drop_follower(request_id)
                continue  # already finished, never admitted, or waiting on a leader
            self._interrupted(uid, self._active[uid], keep_kv=True)  # the client left
            self._active[uid].cancelled()  # its tally: a hang-up still counts what it cost
            self._lanes.remove(uid)
            self._release(uid)
            removed += 1 + self._admit_followers(uid)
            self.stats.requests_cancelled += 1
        return removed

    def _drop_follower(self, request_id: int) -> int:
        for waiting in self._followers.values():
            for pending in waiting:
                if pending.request_id == request_id:
                    waiting.remove(pending)
                    self.stats.requests_cancelled += 1
                    return 1
        return 0

    # -- one step -------------------------------------------------------------------

    def step(self) -> int:
        """One step of every lane (kv_lanes.py), then the rows due to turn quantized move."""
        started = time.perf_counter()
        responses = []
        try:
            for _, generator in self._lanes.items():
                _, generated = generator.next()
                responses += generated
        except Exception as exc:
            return self._restart(exc)
        if responses:
            self.stats.decode_seconds += time.perf_counter() - started
            self.stats.generated_tokens += len(responses)
        drafts = self.speculation.stats
        self.stats.verify_steps = drafts.steps
        self.stats.drafted_tokens, self.stats.accepted_tokens = drafts.drafted, drafts.accepted
        self.stats.fast_forwarded_tokens = drafts.fast_forwarded
        self.stats.draft_models = tuple(self.speculation.draft_models.loaded)
        ended = self._postprocess(responses)
        self.prompt_cache.stepped()
        try:
            self._lanes.move_due(
                {uid: sequence.request.kv for uid, sequence in self._active.items()}
            )
        except Exception as exc:
            return ended + self._restart(exc)
        self._count_kv_bytes()
        return ended

    def _restart(self, exc: Exception) -> int:
        # The batch state is unknown after a failed step: fail its members,
        # start fresh generators, keep serving.
        log.exception("engine step failed")
        ended = self.fail_all(f"generation failed: {exc}")
        self._lanes.reset()
        return ended

    def _count_kv_bytes(self) -> None:
        # New dicts, never updated in place: the worker's report reads them from its thread.
        live, peaks = self._lanes.kv_bytes(), self.stats.kv_peak_bytes
        self.stats.kv_peak_bytes = {
            label: max(peaks.get(label, 0), live.get(label, 0)) for label in {*peaks, *live}
        }
        self.stats.kv_bytes = live
        self.stats.kv_peak_total = max(self.stats.kv_peak_total, sum(live.values()))

    def _postprocess(self, responses) -> int:
        ended = 0
        read = step_logprobs(responses, self._active)
        finished = [r for r in responses if r.finish_reason is not None and r.uid in self._active]
        unstored = self.prompt_cache.dropped_at_once(finished)
        for index, response in enumerate(responses):
            ended += self._admit_followers(response.uid)  # its prompt is cached by now
            sequence = self._active.get(response.uid)
            if sequence is None:
                continue
            if sequence.error is not None:
                ended += self._fail(sequence, f"generation failed: {sequence.error}")
                continue
            if response.uid in unstored:
                self.prompt_cache.forget(response.uid)
            elif response.finish_reason is not None:  # stored before Finished goes out
                self.prompt_cache.save_finished(response)
            try:
                done = sequence.on_token(
                    response.token,
                    read.get(index),
                    response.finish_reason,
                    drafted=response.drafted,
                )
            except Exception as exc:
                log.exception("postprocessing failed for request %s", sequence.request_id)
                ended += self._fail(sequence, f"generation failed: {exc}")
                continue
            if not done:
                self._resuming.save(sequence, due=True)
                continue
            self._resuming.finished(sequence)
            self.history.record(sequence.tokens)
            if response.finish_reason is None:  # a text stop the generator can't see
                self._lanes.remove(response.uid)
            self._release(response.uid)
            self.stats.requests_completed += 1
            ended += 1
        return ended

    def fail_all(self, message: str) -> int:
        waiting = [pending for group in self._followers.values() for pending in group]
        self._followers.clear()
        for pending in waiting:
            self.stats.requests_failed += 1
            pending.emit(Failed(message))
        failed = sum(self._fail(sequence, message) for sequence in list(self._active.values()))
        return failed + len(waiting)

    def _fail(self, sequence: Sequence, message: str) -> int:
        uid = self._uid_of.get(sequence.request_id)
        if uid is None:
            return 0
        self._interrupted(uid, sequence)
        try:
            self._lanes.remove(uid)
        except Exception:  # the generator may be the broken part
            log.debug("could not remove uid %s", uid, exc_info=True)
        self._release(uid)
        self.stats.requests_failed += 1
        sequence.emit(Failed(message))
        return 1 + self._admit_followers(uid)

    def _interrupted(self, uid: int, sequence: Sequence, *, keep_kv: bool = False) -> None:
        """Checkpoint an interrupted sequence; with `keep_kv` (a sound batch: a cancel, not
        a failure) keep its KV state in the prompt cache too, so that its retry prefills no
        replayed token again (and computes none differently)."""
        if not sequence.checkpointing:
            return
        self._resuming.save(sequence)
        if not keep_kv:
            return
        try:
            generator = self._lanes.generator(self._lanes.lane_of(uid))
            cache, tokens = generator.extract_cache([uid])[uid]
        except Exception:  # the checkpoint alone is enough
            log.debug("no KV state kept for interrupted uid %s", uid, exc_info=True)
            return
        if cache is not None and tokens:
            self.prompt_cache.save_interrupted(uid, tokens, cache)

    def _release(self, uid: int) -> None:
        self.prompt_cache.forget(uid)
        self._lanes.forget(uid)
        self.speculation.forget(uid)
        self._logprob_uids.discard(uid)
        sequence = self._active.pop(uid, None)
        if sequence is not None:
            self._uid_of.pop(sequence.request_id, None)
            self._resuming.released(sequence, self._active.values())
