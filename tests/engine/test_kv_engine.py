"""Quantized KV caches inside continuous batching, on the real default model."""

from __future__ import annotations

import pytest

from inference.engine import GenerationRequest
from inference.protocol.events import Finished
from inference.protocol.sampling import KVScheme, SamplingParams

from .helpers import chat_tokens, generate, submit

PROMPTS = ["Name three colours.", "What is the capital of Italy?", "Count from one to five."]
TOKENS = 16


def agreement(tokens: list[int], reference: list[int]) -> float:
    """The share of the reference's tokens matched before the first difference."""
    same = 0
    for mine, theirs in zip(tokens, reference, strict=False):
        if mine != theirs:
            break
        same += 1
    return same / len(reference)


def request(engine, text: str, kv: KVScheme | None = None, scope: str = "") -> GenerationRequest:
    return GenerationRequest(
        chat_tokens(engine, text), max_tokens=TOKENS, logprobs=True, kv=kv, cache_scope=scope
    )


def token_ids(run) -> list[int]:
    return [entry.token_id for delta in run.deltas for entry in delta.logprobs]


def test_quantized_rows_batch_beside_plain_ones(engine):
    plain = [token_ids(generate(engine, request(engine, text))) for text in PROMPTS]
    prompt_length = len(chat_tokens(engine, PROMPTS[0]))
    schemes = {
        "8-bit": KVScheme(8, 64, 0),
        "4-bit": KVScheme(4, 64, 0),
        "4-bit/32": KVScheme(4, 32, 0),
        # plain through the prompt and 4 tokens, then moved into the 8-bit lane
        "8-bit from token 4": KVScheme(8, 64, prompt_length + 4),
    }
    runs = {
        (label, index): submit(engine, request(engine, text, scheme))
        for label, scheme in [("plain", None), *schemes.items()]
        for index, text in enumerate(PROMPTS)
    }
    figures = {}
    for (label, index), run in runs.items():
        assert isinstance(run.wait().end, Finished), (label, run.end)
        figures.setdefault(label, []).append(agreement(token_ids(run), plain[index]))
    mean = {label: round(sum(f) / len(f), 3) for label, f in figures.items()}
    print(mean)
    assert figures["plain"] == [1.0] * len(PROMPTS)  # batched plain rows: unchanged
    # 8-bit keys and values stay closer to the plain cache than 4-bit ones. An exact match is
    # not promised: on the quantized-kernel path one 8-bit row flipped a near-tie at token 5.
    assert mean["8-bit"] > max(mean["4-bit"], mean["4-bit/32"])
    assert min(figures["8-bit"]) > 0
    assert min(figures["8-bit from token 4"]) >= 4 / TOKENS  # plain until its start
    peaks = engine.stats.kv_peak_bytes
    assert {"plain", "8-bit/64", "4-bit/64", "4-bit/32"} <= set(peaks)
    assert all(size > 0 for size in peaks.values())


def test_a_seeded_row_that_turns_quantized_is_reproducible(engine):
    """Moving lanes mid-generation keeps the row's sampler and next token: a seeded request
    gives the same text twice, and one that moves beside others completes. (Batched, its
    quantized attention sums over the batch's padded length: the last bits of its logits,
    and so a sampled token, may differ.)"""
    text = "Invent a name for a dog."
    start = len(chat_tokens(engine, text)) + 3
    sampling = SamplingParams(temperature=1.0, seed=99)
    seeded = GenerationRequest(
        chat_tokens(engine, text), max_tokens=10, sampling=sampling, kv=KVScheme(8, 64, start)
    )
    first = generate(engine, seeded)
    second = generate(engine, seeded)
    assert second.text == first.text
    runs = [
        submit(engine, request(engine, "Name a bird.", KVScheme(8, 64, start - 2))),
        submit(engine, seeded),
        submit(engine, request(engine, "Name a tree.")),
    ]
    assert all(isinstance(run.wait().end, Finished) for run in runs)


def test_the_prompt_cache_keeps_schemes_apart(engine):
    text, scope = "Describe the sea in one short sentence.", "kv-schemes"
    plain = generate(engine, request(engine, text, scope=scope))
    quantized = generate(engine, request(engine, text, KVScheme(8, 64, 0), scope))
    assert plain.end.cached_tokens == 0 and quantized.end.cached_tokens == 0
    again = generate(engine, request(engine, text, KVScheme(8, 64, 0), scope))
    assert again.end.cached_tokens == again.end.prompt_tokens - 1  # its own entry
    assert token_ids(again) == token_ids(quantized)
    for scheme in (KVScheme(4, 64, 0), KVScheme(8, 32, 0), KVScheme(8, 64, 10)):
        assert generate(engine, request(engine, text, scheme, scope)).end.cached_tokens == 0
    assert generate(engine, request(engine, text, scope=scope)).end.cached_tokens > 0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"bits": 3}, "kv_bits must be 4 or 8"),
        ({"bits": 8, "group_size": 48}, "kv_group_size must be 32, 64 or 128"),
        ({"bits": 4, "start": -1}, "quantized_kv_start must be at least 0"),
    ],
)
def test_schemes_check_themselves(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KVScheme(**kwargs)
