"""The batch's KV rows against mlx-lm's single-sequence caches: the quantized rows against
its QuantizedKVCache, the plain rows against its KVCache and BatchKVCache."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache, KVCache, QuantizedKVCache

from inference.engine import load_model
from inference.engine.kv.rows import (
    QuantizedRowCache,
    RowsKVCache,
    RowsQuantizedKVCache,
    batch_of,
    quantize_row,
)

HEADS, DIM = 2, 64


def chunks(length: int, seed: int) -> tuple[mx.array, mx.array]:
    mx.random.seed(seed)
    keys = mx.random.normal((1, HEADS, length, DIM)).astype(mx.float16)
    values = mx.random.normal((1, HEADS, length, DIM)).astype(mx.float16)
    return keys, values


def single(length: int, seed: int, bits: int = 8, group_size: int = 64) -> QuantizedKVCache:
    cache = QuantizedKVCache(group_size=group_size, bits=bits)
    cache.update_and_fetch(*chunks(length, seed))
    return cache


def row(length: int, seed: int, bits: int = 8, group_size: int = 64) -> QuantizedRowCache:
    cache = QuantizedRowCache(group_size=group_size, bits=bits)
    cache.update_and_fetch(*chunks(length, seed))
    return cache


def same_state(batch_row: QuantizedKVCache, reference: QuantizedKVCache) -> bool:
    mine, theirs = batch_row.keys_and_values(), reference.keys_and_values()
    flat = [*mine[0], *mine[1]], [*theirs[0], *theirs[1]]
    return batch_row.offset == reference.offset and all(
        mx.array_equal(a, b).item() for a, b in zip(*flat, strict=True)
    )


@pytest.mark.parametrize("bits,group_size", [(8, 64), (4, 32), (4, 64)])
def test_merged_rows_hold_what_single_caches_hold(bits, group_size):
    lengths = [5, 9, 1]
    batch = RowsQuantizedKVCache.merge(
        [row(n, seed, bits, group_size) for seed, n in enumerate(lengths)]
    )
    assert (batch.bits, batch.group_size) == (bits, group_size)
    assert batch.left_padding.tolist() == [4, 0, 8]
    references = [single(n, seed, bits, group_size) for seed, n in enumerate(lengths)]
    # One more token for every row, through both caches.
    step = [chunks(1, 100 + i) for i in range(3)]
    batch.update_and_fetch(*(mx.concatenate(parts) for parts in zip(*step, strict=True)))
    for reference, new in zip(references, step, strict=True):
        reference.update_and_fetch(*new)
    for index, reference in enumerate(references):
        assert same_state(batch.extract(index), reference)


def test_filter_and_extend_keep_each_rows_state():
    references = [single(n, seed) for seed, n in enumerate([3, 7, 4])]
    batch = RowsQuantizedKVCache.merge([row(n, seed) for seed, n in enumerate([3, 7, 4])])
    batch.filter([0, 2])  # the longest leaves: the padding it forced goes too
    assert batch.left_padding.tolist() == [1, 0]
    assert same_state(batch.extract(0), references[0])
    assert same_state(batch.extract(1), references[2])
    newcomer = RowsQuantizedKVCache.merge([row(12, 9)])
    batch.extend(newcomer)
    assert batch.left_padding.tolist() == [9, 8, 0]
    assert same_state(batch.extract(2), single(12, 9))
    assert same_state(batch.extract(0), references[0])
    empty = RowsQuantizedKVCache.merge([QuantizedRowCache(group_size=64, bits=8)])
    batch.extend(empty)
    assert batch.offset.tolist() == [3, 4, 12, 0]


def prompt_step(batch) -> None:
    """A prompt step of two rows into an empty batch: 2 tokens (right-padded by 3) and 5."""
    short, long = chunks(2, 1), chunks(5, 2)
    padded = [
        mx.concatenate([short[i], mx.zeros((1, HEADS, 3, DIM), mx.float16)], axis=2) for i in (0, 1)
    ]
    batch.prepare(lengths=[2, 5], right_padding=[3, 0])
    batch.update_and_fetch(*(mx.concatenate([padded[i], long[i]]) for i in (0, 1)))
    batch.finalize()


def test_prompt_padding_becomes_left_padding():
    batch = RowsQuantizedKVCache.merge([QuantizedRowCache(), QuantizedRowCache()])
    prompt_step(batch)
    assert batch.left_padding.tolist() == [3, 0]
    assert same_state(batch.extract(0), single(2, 1))
    assert same_state(batch.extract(1), single(5, 2))


def test_a_16_bit_batch_quantizes_as_mlx_lm_does():
    plain = [KVCache() for _ in range(2)]
    for seed, cache in enumerate(plain):
        cache.update_and_fetch(*chunks(3 + 4 * seed, seed))
    quantized = RowsQuantizedKVCache.from_rows(RowsKVCache.merge(plain), group_size=64, bits=4)
    for index, cache in enumerate(plain):
        reference = cache.to_quantized(group_size=64, bits=4)
        assert same_state(quantized.extract(index), reference)
        assert same_state(quantize_row(cache, group_size=64, bits=4), reference)


def plain_row(length: int, seed: int) -> KVCache:
    cache = KVCache()
    cache.update_and_fetch(*chunks(length, seed))
    return cache


def same_plain(mine: KVCache, theirs: KVCache) -> bool:
    return mine.offset == theirs.offset and all(
        mx.array_equal(a, b).item()
        for a, b in zip(mine.keys_and_values(), theirs.keys_and_values(), strict=True)
    )


def test_plain_rows_keep_what_mlx_lms_batch_keeps():
    lengths = [5, 9, 1]
    ours = batch_of([plain_row(n, seed) for seed, n in enumerate(lengths)])
    theirs = BatchKVCache.merge([plain_row(n, seed) for seed, n in enumerate(lengths)])
    assert type(ours) is RowsKVCache
    assert ours.left_padding.tolist() == theirs.left_padding.tolist() == [4, 0, 8]
    step = [chunks(1, 100 + i) for i in range(3)]
    new = [mx.concatenate(parts) for parts in zip(*step, strict=True)]
    for cache in (ours, theirs):
        cache.update_and_fetch(*new)
        cache.filter([0, 1])  # the shortest leaves: the padding every row has goes
    assert ours.idx == theirs.size() == 10 and ours.left_padding.tolist() == [4, 0]
    ours.extend(batch_of([plain_row(12, 7)]))
    theirs.extend(BatchKVCache.merge([plain_row(12, 7)]))
    assert ours.offset.tolist() == theirs.offset.tolist() == [6, 10, 12]
    for index in range(3):
        assert same_plain(ours.extract(index), theirs.extract(index))
    assert ours.nbytes == theirs.nbytes


def test_plain_prompt_padding_becomes_left_padding_and_trims_like_a_kv_cache():
    batch = RowsKVCache.merge([KVCache(), KVCache()])
    prompt_step(batch)
    assert batch.left_padding.tolist() == [3, 0] and batch.right_padding is None
    assert same_plain(batch.extract(0), plain_row(2, 1))
    assert same_plain(batch.extract(1), plain_row(5, 2))
    batch.trim(2)
    reference = plain_row(5, 2)
    reference.trim(2)
    assert same_plain(batch.extract(1), reference) and batch.offset.tolist() == [0, 3]


@pytest.fixture(scope="module")
def model(model_folder):
    return load_model(model_folder).model


def test_batched_logits_match_the_single_sequence_cache(model):
    """The model over a left-padded batch gives each row the logits it gets alone (to
    float noise: a batched matmul sums in another order)."""
    prompts = [[1, 504, 3458, 314, 260], [1, 19842, 28]]
    layers = len(model.layers)

    def alone(prompt):
        cache = [QuantizedKVCache(group_size=64, bits=8) for _ in range(layers)]
        model(mx.array([prompt[:-1]]), cache=cache)
        return model(mx.array([prompt[-1:]]), cache=cache)[0, -1]

    rows = []
    for prompt in prompts:
        cache = [QuantizedRowCache(group_size=64, bits=8) for _ in range(layers)]
        model(mx.array([prompt[:-1]]), cache=cache)
        rows.append(cache)
    batch = [RowsQuantizedKVCache.merge([r[i] for r in rows]) for i in range(layers)]
    logits = model(mx.array([[p[-1]] for p in prompts]), cache=batch)[:, -1]
    for index, prompt in enumerate(prompts):
        assert mx.allclose(logits[index], alone(prompt), atol=2e-2, rtol=1e-3).item()
        assert mx.argmax(logits[index]).item() == mx.argmax(alone(prompt)).item()


def test_the_prompt_cache_holds_a_quantized_entry_back_below_its_start():
    from inference.engine.caching.prompt_cache import PromptCache, PromptCacheConfig
    from inference.protocol.sampling import KVScheme

    cache = PromptCache(PromptCacheConfig(), key="model")
    tokens = list(range(10))
    early, late = KVScheme(8, 64, 0), KVScheme(8, 64, 20)
    cache._store(tokens, [row(10, 1)], ("", early))
    cache._store(tokens, [row(10, 2)], ("", late))
    assert cache.lookup(tokens + [99], kv=early).cached_tokens == 10
    assert cache.lookup(tokens + [99], kv=late).cached_tokens == 0  # still unquantized there
    assert cache.lookup(tokens + [99]).cached_tokens == 0  # a plain request: none of its own
