"""The prompt cache on the real default model: hits, the chat boundary, equal greedy output."""

from __future__ import annotations

import threading
import time
import uuid

import mlx.core as mx
from mlx_lm.generate import GenerationBatch
from mlx_lm.models.cache import KVCache

from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
from inference.engine.caching.prompt_cache import MIN_DISK_GAIN, PromptCache, PromptCacheConfig
from inference.engine.prompting.prompt import PromptBuilder
from inference.protocol.events import Failed, Finished

from .helpers import Run, generate, submit

# `<|im_start|>system\n`: the only part of a fresh chat prompt other tests' entries share.
SHARED_HEADER = 3


def fresh_system() -> dict:
    """A system prompt no other test shares, so its cache entries are this test's own."""
    return {"role": "system", "content": f"Session {uuid.uuid4().hex[:8]}. Be terse."}


def chat(engine, system: dict, *turns: str) -> list[int]:
    """Chat tokens for alternating user and assistant turns, then the generation primer."""
    roles = ("user", "assistant")
    messages = [system] + [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
    return list(engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True))


def boundary(engine, prompt: list[int], system: dict, *turns: str) -> int | None:
    """The chat prompt's cache boundary, as the worker probes it (cache_boundary.py)."""
    roles = ("user", "assistant")
    messages = [system] + [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
    return PromptBuilder(engine.loaded).boundary.find(prompt, messages, None, {})


def test_a_repeated_prompt_hits_and_answers_the_same(engine):
    prompt = chat(engine, fresh_system(), "Name a fish.")
    cold = generate(engine, GenerationRequest(prompt, max_tokens=8))
    warm = generate(engine, GenerationRequest(prompt, max_tokens=8))
    assert cold.end.cached_tokens <= SHARED_HEADER
    assert warm.end.cached_tokens == len(prompt) - 1  # the last token is always recomputed
    assert warm.text == cold.text


def test_the_next_turn_hits_and_answers_as_without_the_cache(engine):
    system = fresh_system()
    first = chat(engine, system, "Name a fish.")
    reply = generate(engine, GenerationRequest(first, max_tokens=8))
    second = chat(engine, system, "Name a fish.", reply.text, "And a bird?")
    warm = generate(engine, GenerationRequest(second, max_tokens=10))
    assert warm.end.cached_tokens >= len(first)
    engine.prompt_cache.clear()
    cold = generate(engine, GenerationRequest(second, max_tokens=10))
    assert cold.end.cached_tokens == 0
    assert warm.text == cold.text


def test_a_cancelled_chat_still_leaves_its_prompt_at_its_boundary(engine):
    system, ask = fresh_system(), "Write a long poem about the sea."
    prompt = chat(engine, system, ask)
    stored_at = boundary(engine, prompt, system, ask)
    assert stored_at == len(prompt) - 1  # ChatML's next turn keeps the whole prompt
    request = GenerationRequest(prompt, max_tokens=64, cache_boundary=stored_at)
    run = submit(engine, request)
    deadline = time.monotonic() + 120
    while not run.deltas and time.monotonic() < deadline:
        time.sleep(0.01)  # prefill is over once text flows; cancel long before the end
    engine.cancel(run.request_id)
    again = generate(engine, GenerationRequest(prompt, max_tokens=4))
    assert again.end.cached_tokens == stored_at


def test_cached_requests_batched_together_answer_as_alone(engine):
    system = fresh_system()
    first = chat(engine, system, "Hello.")
    generate(engine, GenerationRequest(first, max_tokens=2))
    prompts = [chat(engine, system, "Hello.", "Hi.", q) for q in ("A fish?", "A boat?", "A wave?")]
    alone = [generate(engine, GenerationRequest(p, max_tokens=8)) for p in prompts]
    assert all(run.end.cached_tokens >= len(first) - 1 for run in alone)
    engine.prompt_cache.clear()
    generate(engine, GenerationRequest(first, max_tokens=2))
    runs = [submit(engine, GenerationRequest(p, max_tokens=8)) for p in prompts]
    assert [run.wait().text for run in runs] == [run.text for run in alone]
    assert all(run.end.cached_tokens >= len(first) - 1 for run in runs)


def _entry(tokens: int) -> list[KVCache]:
    cache = KVCache()
    cache.update_and_fetch(mx.zeros((1, 1, tokens, 4)), mx.zeros((1, 1, tokens, 4)))
    return [cache]


def test_the_cache_is_bounded_by_entries_and_bytes():
    by_entries = PromptCache(PromptCacheConfig(max_entries=2), key="m")
    for first in (1, 2, 3):
        by_entries._store([first, 10, 11], _entry(3))
    assert by_entries.stats().entries == 2
    assert by_entries.lookup([1, 10, 11, 12]).cached_tokens == 0  # the oldest went first
    assert by_entries.lookup([3, 10, 11, 12]).cached_tokens == 3

    entry_bytes = sum(c.nbytes for c in _entry(3))
    by_bytes = PromptCache(PromptCacheConfig(max_bytes=2 * entry_bytes), key="m")
    for first in (1, 2, 3):
        by_bytes._store([first, 10, 11], _entry(3))
    assert by_bytes.stats().entries == 2 and by_bytes.stats().bytes <= 2 * entry_bytes


def test_entries_never_cross_models_and_zero_entries_turns_it_off():
    one, other = (
        PromptCache(PromptCacheConfig(), key="a"),
        PromptCache(PromptCacheConfig(), key="b"),
    )
    other._lru = one._lru  # even sharing the store, keys keep models apart
    one._store([1, 2, 3], _entry(3))
    assert one.lookup([1, 2, 3, 4]).cached_tokens == 3
    assert other.lookup([1, 2, 3, 4]).cached_tokens == 0
    off = PromptCache(PromptCacheConfig(max_entries=0), key="a")
    off._store([1, 2, 3], _entry(3))
    assert off.lookup([1, 2, 3, 4]).cached_tokens == 0 and off.stats().entries == 0


def test_a_stored_entry_is_queued_not_waited_for(monkeypatch, tmp_path):
    """A wait per finished row would stall the decode pipeline (the next step is queued);
    the disk tier's copies are evaluated once a later step's wait has covered them."""
    from inference.engine.caching.disk_writer import DiskWriter

    calls = []
    monkeypatch.setattr(mx, "eval", lambda *a: calls.append("eval"))
    monkeypatch.setattr(mx, "async_eval", lambda *a: calls.append("async_eval"))
    memory = PromptCache(PromptCacheConfig(), key="m")
    memory._store([1, 2, 3], _entry(3))
    memory._keep_session([1, 2, 3], _entry(3), "", "s")
    assert calls == ["async_eval", "async_eval"]
    assert memory.lookup([1, 2, 3, 4]).cached_tokens == 3
    calls.clear()
    writer = DiskWriter()
    config = PromptCacheConfig(disk_dir=tmp_path, disk_max_bytes=1 << 20)
    disk = PromptCache(config, key="m", identity={"model": "m"}, writer=writer)
    disk._store([1, 2, 3], _entry(3))  # the entry, then the disk tier's copies: queued
    assert calls == ["async_eval", "async_eval"]
    disk.stepped()
    assert "eval" not in calls
    disk.stepped()
    assert calls[2:] == ["eval"]
    writer.close()


def test_the_disk_tier_is_read_only_for_a_prefix_worth_the_read(tmp_path):
    """A file is read whole: for the few tokens a new prompt shares past RAM's prefix
    (a template's, say), prefill costs less than the read."""
    from inference.engine.caching.disk_writer import DiskWriter

    writer = DiskWriter()
    config = PromptCacheConfig(disk_dir=tmp_path, disk_max_bytes=1 << 20)
    before = PromptCache(config, key="m", identity={"model": "m"}, writer=writer)
    tokens = list(range(1, 41))
    before._store(tokens, _entry(40))
    before.hand_over()
    assert writer.flush(10)
    after = PromptCache(config, key="m", identity={"model": "m"}, writer=writer)  # a restart
    few = MIN_DISK_GAIN - 1
    assert after.lookup([*tokens[:few], 999, 1000]).cached_tokens == 0
    assert after.stats().disk_hits == 0
    assert after.lookup([*tokens[:30], 999]).cached_tokens == 30
    assert after.stats().disk_hits == 1
    writer.close()


def test_entries_never_cross_scopes():
    cache = PromptCache(PromptCacheConfig(), key="m")
    cache._store([1, 2, 3], _entry(3), "user:1")
    assert cache.lookup([1, 2, 3, 4], "user:2").cached_tokens == 0
    assert cache.lookup([1, 2, 3, 4], "").cached_tokens == 0
    plan = cache.lookup([1, 2, 3, 4], "user:1")
    assert plan.cached_tokens == 3 and plan.scope == "user:1"


def test_equal_prompts_submitted_together_prefill_once(engine):
    prompt = chat(engine, fresh_system(), "Name a fish.")
    before = engine.prompt_cache.stats()
    runs = [Run() for _ in range(3)]
    ids = engine.submit_many([(GenerationRequest(prompt, max_tokens=6), run.emit) for run in runs])
    assert len(set(ids)) == 3
    texts = [run.wait().text for run in runs]
    after = engine.prompt_cache.stats()
    assert after.lookups - before.lookups == 3
    # One computed the prompt (past what other tests left); the other two started from
    # its cache, one token short.
    cached = sorted(run.end.cached_tokens for run in runs)
    assert cached[0] < 10 and cached[1:] == [len(prompt) - 1] * 2
    assert after.cached_tokens - before.cached_tokens == sum(cached)
    assert texts[0] and texts.count(texts[0]) == 3  # greedy: the same answer each time
    assert engine.in_flight == 0


def test_a_session_keeps_its_last_turn_whatever_else_comes():
    cache = PromptCache(PromptCacheConfig(max_entries=1), key="m")
    cache._keep_session([1, 2, 3], _entry(3), "user:1", "a")
    for first in (4, 5, 6):  # traffic that fills and churns the LRU
        cache._store([first, 10, 11], _entry(3), "user:1")
    assert cache.lookup([1, 2, 3, 4], "user:1", session="a").cached_tokens == 3
    assert cache.lookup([1, 2, 3, 4], "user:1").cached_tokens == 0  # the session's own
    assert cache.lookup([1, 2, 3, 4], "user:2", session="a").cached_tokens == 0  # and scope's
    stats = cache.stats()
    assert (stats.sessions, stats.entries) == (1, 2)


def test_a_session_s_next_turn_replaces_its_last_and_old_sessions_go_first():
    cache = PromptCache(PromptCacheConfig(max_sessions=2), key="m")
    cache._keep_session([1, 2, 3], _entry(3), "", "a")
    cache._keep_session([7, 8, 9, 10], _entry(4), "", "a")
    assert cache.stats().sessions == 1
    assert cache.lookup([1, 2, 3, 4], session="a").cached_tokens == 0
    # A prompt that shares only part of the kept turn gets that part, trimmed.
    plan = cache.lookup([7, 8, 5, 6], session="a")
    assert plan.cached_tokens == 2 and plan.cache[0].offset == 2
    cache._keep_session([1, 2], _entry(2), "", "b")
    cache._keep_session([3, 4], _entry(2), "", "c")
    assert cache.stats().sessions == 2
    assert cache.lookup([7, 8, 9, 10, 11], session="a").cached_tokens == 0  # the oldest
    assert cache.lookup([3, 4, 5], session="c").cached_tokens == 2


def test_a_session_lookup_takes_the_longer_of_its_turn_and_the_lru():
    cache = PromptCache(PromptCacheConfig(), key="m")
    cache._store([1, 2, 3, 4, 5], _entry(5))
    cache._keep_session([1, 2], _entry(2), "", "a")
    assert cache.lookup([1, 2, 3, 4, 5, 6], session="a").cached_tokens == 5


def _finished(uid: int, tokens: list[int]) -> GenerationBatch.Response:
    return GenerationBatch.Response(uid, 0, None, "length", _entry(len(tokens)), tokens)


def test_rows_finishing_together_past_the_bound_store_only_what_the_lru_keeps(tmp_path):
    """Copying a row's KV state out of the batch costs a kernel a layer's keys and values;
    rows the same step's later rows would evict at once are not copied at all."""
    from inference.engine.caching.disk_writer import DiskWriter

    cache = PromptCache(PromptCacheConfig(max_entries=2), key="m")
    finished = [_finished(uid, [uid, 10, 11]) for uid in range(4)]
    dropped = cache.dropped_at_once(finished)
    assert dropped == {0, 1}
    for response in finished:
        if response.uid not in dropped:
            cache.save_finished(response)
    assert cache.stats().stores == 2 and cache.stats().entries == 2
    assert [cache.lookup([uid, 10, 11, 12]).cached_tokens for uid in range(4)] == [0, 0, 3, 3]
    assert cache.dropped_at_once(finished[:2]) == set()  # within the bound: all stored

    writer = DiskWriter()
    config = PromptCacheConfig(max_entries=2, disk_dir=tmp_path, disk_max_bytes=1 << 20)
    disk = PromptCache(config, key="m", identity={"model": "m"}, writer=writer)
    assert disk.dropped_at_once(finished) == set()  # the disk tier keeps them all
    writer.close()


def test_a_batch_finishing_at_once_stores_the_lru_s_bound_of_rows(model_folder):
    config = EngineConfig(max_batch_size=8, prompt_cache=PromptCacheConfig(max_entries=2))
    engine = Engine(lambda: load_model(model_folder), config=config).start()
    try:
        # One length, four rows (the CPU engine's prefill batch): one prefill, one finish.
        prompts = [[4 + i, 3, 2, 1] for i in range(4)]
        done = [threading.Event() for _ in prompts]
        ends: list = [None] * len(prompts)

        def emitter(i: int):
            def emit(event) -> None:
                if isinstance(event, (Finished, Failed)):
                    ends[i] = event
                    done[i].set()

            return emit

        engine.submit_many(
            [(GenerationRequest(p, max_tokens=2), emitter(i)) for i, p in enumerate(prompts)]
        )
        assert all(event.wait(120) for event in done)
        assert all(isinstance(end, Finished) and end.completion_tokens == 2 for end in ends)
        assert engine.prompt_cache.stats().stores == 2  # the last two rows; two never copied
        assert engine.prompt_cache.lookup(prompts[-1] + [9]).cached_tokens == 4
        assert engine.prompt_cache.lookup(prompts[0] + [9]).cached_tokens == 0
    finally:
        engine.shutdown()
