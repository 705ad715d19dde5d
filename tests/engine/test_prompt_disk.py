"""The prompt cache's disk tier: on the real model across engine restarts, and its files."""

from __future__ import annotations

import os
import threading
import time
import uuid

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from inference.engine import Engine, EngineConfig, GenerationRequest, load_model
from inference.engine.caching.disk_writer import DiskWriter
from inference.engine.caching.identity import canonical_json, files_fingerprint
from inference.engine.caching.prompt_cache import PromptCacheConfig
from inference.engine.caching.prompt_disk import DiskTier, read_header
from inference.protocol.sampling import KVLayer, KVScheme

from .helpers import generate


@pytest.fixture
def restartable(model_folder, tmp_path):
    """Engines over one disk tier folder, started (and restarted) on demand."""
    config = EngineConfig(
        prompt_cache=PromptCacheConfig(disk_dir=tmp_path / "prompt-cache", disk_max_bytes=1 << 30)
    )
    started: list[Engine] = []

    def start() -> Engine:
        for engine in started:
            engine.shutdown()  # what it queued for the disk is written on the way out
        started.append(Engine(lambda: load_model(model_folder), config=config).start())
        return started[-1]

    yield start
    for engine in started:
        engine.shutdown()


def chat(engine: Engine, *turns: str, session: str = "") -> list[int]:
    """Chat tokens under a system prompt of the session's (a fresh one by default)."""
    system = {"role": "system", "content": f"Session {session or uuid.uuid4().hex[:8]}. Terse."}
    messages = [system] + [
        {"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(turns)
    ]
    return list(engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True))


def test_a_prompt_cached_before_a_restart_hits_from_disk_and_answers_as_cold(restartable):
    engine = restartable()
    prompt = chat(engine, "Name three fish.")
    cold = generate(engine, GenerationRequest(prompt, max_tokens=16))
    assert cold.end.cached_tokens == 0

    engine = restartable()
    assert engine.prompt_cache.stats().disk_entries == 1  # found by the new engine's scan
    warm = generate(engine, GenerationRequest(prompt, max_tokens=16))
    assert warm.end.cached_tokens == len(prompt) - 1
    assert warm.text == cold.text
    stats = engine.prompt_cache.stats()
    assert stats.disk_hits == 1 and stats.cached_tokens == len(prompt) - 1


def test_the_next_turn_after_a_restart_reuses_the_last_one_from_disk(restartable):
    engine = restartable()
    session = uuid.uuid4().hex[:8]
    first = chat(engine, "Name a bird.", session=session)
    reply = generate(engine, GenerationRequest(first, max_tokens=8))

    engine = restartable()
    second = chat(engine, "Name a bird.", reply.text, "And a tree?", session=session)
    writes = engine.prompt_cache.stats().disk_writes
    warm = generate(engine, GenerationRequest(second, max_tokens=10))
    assert warm.end.cached_tokens >= len(first) - 1
    # Its own entry reaches the writer once the batch empties, after Finished went out:
    # on disk before the clear, or the clear would miss it.
    deadline = time.monotonic() + 30
    while engine.prompt_cache.stats().disk_writes == writes and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.prompt_cache.clear()
    engine.prompt_cache.disk.clear()
    cold = generate(engine, GenerationRequest(second, max_tokens=10))
    assert cold.end.cached_tokens == 0
    assert warm.text == cold.text


def test_entries_of_another_caller_or_kv_scheme_are_never_read(restartable):
    engine = restartable()
    prompt = chat(engine, "Name a river.")
    generate(engine, GenerationRequest(prompt, max_tokens=4, cache_scope="user:1"))

    engine = restartable()
    other = generate(engine, GenerationRequest(prompt, max_tokens=4, cache_scope="user:2"))
    scheme = KVScheme(bits=8, start=0)
    quantized = generate(
        engine, GenerationRequest(prompt, max_tokens=4, cache_scope="user:1", kv=scheme)
    )
    assert other.end.cached_tokens == quantized.end.cached_tokens == 0
    mine = generate(engine, GenerationRequest(prompt, max_tokens=4, cache_scope="user:1"))
    assert mine.end.cached_tokens == len(prompt) - 1


@pytest.mark.parametrize("per_layer", [False, True], ids=["kv_bits", "kv_config"])
def test_a_quantized_entry_comes_back_quantized(restartable, per_layer):
    engine = restartable()
    prompt = chat(engine, "Name a mountain.")
    scheme = KVScheme(bits=4, group_size=32, start=0)
    if per_layer:  # every other layer quantized, the others plain
        count = len(engine.loaded.model.layers)
        scheme = KVScheme(start=0, layers=(KVLayer(4, 32), None) * (count // 2))
    cold = generate(engine, GenerationRequest(prompt, max_tokens=8, kv=scheme))

    engine = restartable()
    warm = generate(engine, GenerationRequest(prompt, max_tokens=8, kv=scheme))
    assert warm.end.cached_tokens == len(prompt) - 1
    assert warm.text == cold.text
    other = KVScheme(bits=4, group_size=32, start=0) if per_layer else None
    assert (
        generate(engine, GenerationRequest(prompt, max_tokens=2, kv=other)).end.cached_tokens == 0
    )


# -- the tier's files, without a model ------------------------------------------------


def row(tokens: int, value: float = 1.0) -> list:
    """A two-layer plain cache holding `tokens` tokens."""
    cache = []
    for _ in range(2):
        layer = KVCache()
        layer.update_and_fetch(*(mx.full((1, 2, tokens, 8), value) for _ in range(2)))
        cache.append(layer)
    mx.eval([layer.state for layer in cache])
    return cache


def test_files_are_written_on_the_writers_thread_never_the_callers(tmp_path):
    writer = DiskWriter()
    gate = threading.Event()
    writer.submit(gate.wait)  # the writer is busy until the gate opens
    tier = DiskTier(tmp_path, 1 << 20, writer)
    started = time.perf_counter()
    tier.put("me", list(range(10)), row(10))
    tier.hand_over()
    assert time.perf_counter() - started < 1.0
    assert not list(tmp_path.glob("*.safetensors"))  # nothing written on this thread
    gate.set()
    assert writer.flush(10)
    (written,) = tmp_path.glob("*.safetensors")
    assert read_header(written)["tokens"] == list(range(10))
    writer.close()


def test_an_entry_reaches_the_writer_only_once_a_later_step_covers_its_copies(tmp_path):
    # Queued behind the step already on the device, the copies are computed once the step
    # after it is waited for: handed over then, evaluating them never stalls the decode.
    writer = DiskWriter()
    tier = DiskTier(tmp_path, 1 << 20, writer)
    tier.put("me", list(range(10)), row(10, 3.0))
    tier.put("me", list(range(10)), row(10, 3.0))  # the same state, queued once
    tier.stepped()
    assert writer.flush(10) and not list(tmp_path.glob("*.safetensors"))
    tier.stepped()
    assert writer.flush(10)
    (written,) = tmp_path.glob("*.safetensors")
    loaded = tier.load(tier.best("me", list(range(12)))[0])
    assert mx.array_equal(loaded[0].values, mx.full((1, 2, 10, 8), 3.0)).item()
    assert tier.stats()["disk_writes"] == 1
    tier.put("me", list(range(20)), row(20))
    tier.hand_over()  # the batch emptied: at once
    assert writer.flush(10) and tier.stats()["disk_writes"] == 2
    writer.close()


def test_the_tier_is_bounded_in_bytes_and_drops_what_a_longer_entry_covers(tmp_path):
    writer = DiskWriter()
    tier = DiskTier(tmp_path, 1 << 20, writer)
    tier.put("me", list(range(10)), row(10))
    tier.put("me", list(range(20)), row(20))  # extends the first: the first goes
    tier.put("you", list(range(10)), row(10))  # another owner's: kept
    tier.hand_over()
    writer.flush(10)
    assert tier.stats()["disk_entries"] == 2
    entry, usable = tier.best("me", list(range(15)) + [99])
    assert len(entry.tokens) == 20 and usable == 15
    assert tier.best("nobody", list(range(15)))[0] is None
    size = max(entry.nbytes for entry in tier._entries.values())  # 20 tokens' file
    bound = int(size * 2.5)
    small = DiskTier(tmp_path / "small", bound, writer)
    for start in range(3):
        small.put("me", [start + 100, *range(19)], row(20))
        small.hand_over()
        writer.flush(10)
        time.sleep(0.01)  # distinct times: the oldest is known
    kept = sorted(entry.tokens[0] for entry in small._entries.values())
    assert kept == [101, 102] and small.stats()["disk_bytes"] <= bound
    assert len(list((tmp_path / "small").glob("*.safetensors"))) == 2
    writer.close()


def test_a_restart_drops_damaged_and_unfinished_files(tmp_path):
    writer = DiskWriter()
    tier = DiskTier(tmp_path, 1 << 20, writer)
    tier.put("me", list(range(10)), row(10, 2.0))
    tier.hand_over()
    writer.flush(10)
    (tmp_path / "broken.safetensors").write_bytes(b"not a safetensors file")
    stale = tmp_path / ".left-by-a-killed-writer.safetensors"
    stale.write_bytes(b"half")
    os.utime(stale, (0, 0))
    again = DiskTier(tmp_path, 1 << 20, writer)
    assert again.stats()["disk_entries"] == 1
    assert not (tmp_path / "broken.safetensors").exists() and not stale.exists()
    entry, usable = again.best("me", list(range(12)))
    loaded = again.load(entry)
    assert usable == 10 and loaded[0].offset == 10
    assert mx.array_equal(loaded[1].keys, mx.full((1, 2, 10, 8), 2.0)).item()
    writer.close()


def test_a_model_or_adapter_fingerprint_follows_its_files(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "config.json").write_text("{}")
    before = files_fingerprint(tmp_path)
    assert files_fingerprint(tmp_path) == before
    os.utime(tmp_path / "model.safetensors", ns=(1, 1))
    assert files_fingerprint(tmp_path) != before


def test_canonical_json_sorts_keys_and_keeps_array_order():
    assert canonical_json({"b": [3, 1], "a": {"z": 1, "y": None}, 5: 0.8}) == (
        '{"5":0.8,"a":{"y":null,"z":1},"b":[3,1]}'
    )
