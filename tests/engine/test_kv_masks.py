"""The batch rows' masks (kv/rows.py): decode steps of an unpadded batch skip the attention
mask, its prompt steps may take MLX's causal mode, and nothing else changes."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import KVCache

from inference.engine import load_model
from inference.engine.kv import rows as kv_rows
from inference.engine.kv.rows import RowsKVCache
from inference.engine.loop.generator import Generator


def _batch_cache(lengths: list[int]) -> RowsKVCache:
    rows = []
    for length in lengths:
        cache = KVCache()
        cache.update_and_fetch(mx.ones((1, 2, length, 4)), mx.ones((1, 2, length, 4)))
        rows.append(cache)
    return RowsKVCache.merge(rows)


def _array_mask(cache: RowsKVCache, length: int) -> mx.array:
    """The mask mlx-lm's BatchKVCache gives: always the array."""
    return create_causal_mask(length, offset=cache.idx, left_padding=cache.left_padding)


def test_one_query_over_unpadded_rows_needs_no_mask():
    assert _batch_cache([5, 5, 5]).make_mask(1) is None
    assert _batch_cache([7]).make_mask(1) is None


def test_padded_rows_prompts_and_explicit_requests_keep_the_mask():
    padded = _batch_cache([3, 6])
    mask = padded.make_mask(1)
    original = _array_mask(padded, 1)
    assert mask is not None and mx.array_equal(mask, original).item()
    assert not mask[0].flatten().tolist()[0]  # the short row's padding stays hidden
    assert _batch_cache([5, 5]).make_mask(4) is not None
    assert _batch_cache([5, 5]).make_mask(1, return_array=True) is not None


def test_a_row_leaving_is_seen_once_its_padding_changes():
    cache = _batch_cache([3, 6])
    assert cache.make_mask(1) is not None
    cache.filter([1])  # the long row alone: its padding is gone
    assert cache.make_mask(1) is None


def test_a_prompt_step_s_right_padding_is_seen_once_it_turns_left():
    # Rows of one length take a prompt step of pieces of two lengths: before it they are
    # unpadded, after it the short piece's row is left-padded (an in-place update of the
    # padding would have kept the first answer).
    cache = _batch_cache([4, 4])
    assert cache.make_mask(1) is None
    cache.prepare(lengths=[1, 3], right_padding=[2, 0])
    cache.update_and_fetch(mx.ones((2, 2, 3, 4)), mx.ones((2, 2, 3, 4)))
    cache.finalize()
    assert cache.left_padding.tolist() == [2, 0]
    assert cache.make_mask(1) is not None


def _greedy(model, prompts: list[list[int]], tokens: int = 12) -> list[list[int]]:
    generator = Generator(model, completion_batch_size=4)
    uids = generator.insert(prompts, max_tokens=[tokens] * len(prompts))
    out = {uid: [] for uid in uids}
    try:
        while any(len(row) < tokens for row in out.values()):
            for response in generator.next_generated():
                out[response.uid].append(response.token)
    finally:
        generator.close()
    return [out[uid] for uid in uids]


def test_greedy_tokens_are_those_of_the_masked_step(model_folder, monkeypatch):
    loaded = load_model(model_folder)
    encode = loaded.tokenizer.encode
    texts = ["The capital of France is", "The capital of Spain is", "Water boils at"]
    length = min(len(encode(text)) for text in texts)
    prompts = [encode(text)[:length] for text in texts]
    masks = []
    real_mask = RowsKVCache.make_mask
    monkeypatch.setattr(
        RowsKVCache,
        "make_mask",
        lambda c, n, **kw: masks.append((n, real_mask(c, n, **kw))) or masks[-1][1],
    )
    unmasked = _greedy(loaded.model, prompts)
    decode_steps = [mask for n, mask in masks if n == 1]
    assert decode_steps and all(mask is None for mask in decode_steps)
    monkeypatch.setattr(RowsKVCache, "make_mask", lambda c, n, **kw: _array_mask(c, n))
    assert _greedy(loaded.model, prompts) == unmasked


def test_prompt_steps_of_unpadded_rows_take_the_causal_mode_where_asked(monkeypatch):
    assert not isinstance(_batch_cache([5, 5]).make_mask(4), str)  # the CPU keeps the array
    monkeypatch.setattr(kv_rows, "CAUSAL_PROMPT_STEPS", True)
    assert _batch_cache([5, 5]).make_mask(4) == "causal"
    assert _batch_cache([7]).make_mask(3) == "causal"
    assert not isinstance(_batch_cache([3, 6]).make_mask(4), str)  # padding stays hidden
    assert not isinstance(_batch_cache([5, 5]).make_mask(4, window_size=2), str)


@pytest.mark.skipif(mx.default_device() != mx.gpu, reason="the causal mode is a GPU's default")
def test_a_gpu_takes_the_causal_mode_by_default():
    assert _batch_cache([5, 5]).make_mask(4) == "causal"
    assert not isinstance(_batch_cache([3, 6]).make_mask(4), str)


def test_causal_prompt_steps_give_the_masked_prefill(model_folder, monkeypatch):
    loaded = load_model(model_folder)
    prompt = mx.array([loaded.tokenizer.encode("The capital of France is Paris, and Spain")])
    cached = mx.array([loaded.tokenizer.encode(" has Madrid")])

    def logits(causal: bool) -> mx.array:
        monkeypatch.setattr(kv_rows, "CAUSAL_PROMPT_STEPS", causal)
        cache = [RowsKVCache([0]) for _ in loaded.model.layers]
        first = loaded.model(prompt, cache=cache)
        then = loaded.model(cached, cache=cache)  # a prompt step after cached keys
        return mx.concatenate([first, then], axis=1).astype(mx.float32)

    masked, causal = logits(False), logits(True)
    assert mx.allclose(masked, causal, atol=1e-4).item()
    assert mx.array_equal(masked.argmax(-1), causal.argmax(-1)).item()
