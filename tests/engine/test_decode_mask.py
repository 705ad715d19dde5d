"""Decode steps of an unpadded batch skip the attention mask, its prompt steps may take MLX's
causal mode, and nothing else changes."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import BatchKVCache, KVCache

from inference.engine import load_model
from inference.engine.loop import decode_mask
from inference.engine.loop.exact_attention import exact_attention


def _batch_cache(lengths: list[int]) -> BatchKVCache:
    rows = []
    for length in lengths:
        cache = KVCache()
        cache.update_and_fetch(mx.ones((1, 2, length, 4)), mx.ones((1, 2, length, 4)))
        rows.append(cache)
    return rows[0].merge(rows)


@pytest.fixture(scope="module", autouse=True)
def installed():
    decode_mask.install()


def test_one_query_over_unpadded_rows_needs_no_mask():
    assert _batch_cache([5, 5, 5]).make_mask(1) is None
    assert _batch_cache([7]).make_mask(1) is None


def test_padded_rows_prompts_and_explicit_requests_keep_the_mask():
    padded = _batch_cache([3, 6])
    mask = padded.make_mask(1)
    original = BatchKVCache.make_mask.original(padded, 1)
    assert mask is not None and mx.array_equal(mask, original).item()
    assert not mask[0].flatten().tolist()[0]  # the short row's padding stays hidden
    assert _batch_cache([5, 5]).make_mask(4) is not None
    assert _batch_cache([5, 5]).make_mask(1, return_array=True) is not None


def test_a_row_leaving_is_seen_once_its_padding_changes():
    cache = _batch_cache([3, 6])
    assert cache.make_mask(1) is not None
    cache.filter([1])  # the long row alone: its padding is gone
    assert cache.make_mask(1) is None


def _greedy(model, prompts: list[list[int]], tokens: int = 12) -> list[list[int]]:
    generator = BatchGenerator(model, stop_tokens=None, completion_batch_size=4)
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
    skipped = []
    real_unpadded = decode_mask.unpadded
    monkeypatch.setattr(
        decode_mask, "unpadded", lambda c: skipped.append(real_unpadded(c)) or skipped[-1]
    )
    unmasked = _greedy(loaded.model, prompts)
    assert skipped and all(skipped)
    monkeypatch.setattr(BatchKVCache, "make_mask", BatchKVCache.make_mask.original)
    assert _greedy(loaded.model, prompts) == unmasked


def test_prompt_steps_of_unpadded_rows_take_the_causal_mode_where_asked(monkeypatch):
    assert not isinstance(_batch_cache([5, 5]).make_mask(4), str)  # the CPU keeps the array
    monkeypatch.setattr(decode_mask, "CAUSAL_PROMPT_STEPS", True)
    assert _batch_cache([5, 5]).make_mask(4) == "causal"
    assert _batch_cache([7]).make_mask(3) == "causal"
    assert not isinstance(_batch_cache([3, 6]).make_mask(4), str)  # padding stays hidden
    assert not isinstance(_batch_cache([5, 5]).make_mask(4, window_size=2), str)
    with exact_attention():  # a verifying pass splits the array query by query
        assert not isinstance(_batch_cache([5, 5]).make_mask(4), str)


@pytest.mark.skipif(mx.default_device() != mx.gpu, reason="the causal mode is a GPU's default")
def test_a_gpu_takes_the_causal_mode_by_default():
    assert _batch_cache([5, 5]).make_mask(4) == "causal"
    assert not isinstance(_batch_cache([3, 6]).make_mask(4), str)


def test_causal_prompt_steps_give_the_masked_prefill(model_folder, monkeypatch):
    loaded = load_model(model_folder)
    prompt = mx.array([loaded.tokenizer.encode("The capital of France is Paris, and Spain")])
    cached = mx.array([loaded.tokenizer.encode(" has Madrid")])

    def logits(causal: bool) -> mx.array:
        monkeypatch.setattr(decode_mask, "CAUSAL_PROMPT_STEPS", causal)
        cache = [BatchKVCache([0]) for _ in loaded.model.layers]
        first = loaded.model(prompt, cache=cache)
        then = loaded.model(cached, cache=cache)  # a prompt step after cached keys
        return mx.concatenate([first, then], axis=1).astype(mx.float32)

    masked, causal = logits(False), logits(True)
    assert mx.allclose(masked, causal, atol=1e-4).item()
    assert mx.array_equal(masked.argmax(-1), causal.argmax(-1)).item()
