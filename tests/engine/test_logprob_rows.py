"""Decode steps keep a distribution only for the rows that read logprobs (decoding.py), on
the real default model: the same greedy tokens as mlx-lm's own batch loop, and logprobs
wherever a row reads them."""

from __future__ import annotations

from mlx_lm.generate import BatchGenerator

from inference.engine import GenerationRequest
from inference.engine.loop.generator import Generator

from .helpers import chat_tokens, generate, submit

QUESTIONS = ("Name three rivers.", "What is 7 times 8?", "Say hello in French.", "Count to five.")
TOKENS = 24


def decode(generator, prompts: list[list[int]]) -> tuple[dict, dict]:
    """Every row's tokens, and whether each of its responses carried a logprobs row."""
    uids = generator.insert(prompts, [TOKENS] * len(prompts))
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    rows: dict[int, list[bool]] = {uid: [] for uid in uids}
    live = set(uids)
    while live:
        for response in generator.next_generated():
            tokens[response.uid].append(response.token)
            rows[response.uid].append(response.logprobs is not None)
            if response.finish_reason is not None:
                live.discard(response.uid)
    generator.close()
    return [tokens[uid] for uid in uids], [rows[uid] for uid in uids]


def test_lean_steps_sample_what_mlx_lm_s_step_samples(engine):
    model = engine.loaded.model
    prompts = [chat_tokens(engine, question) for question in QUESTIONS]
    options = {"completion_batch_size": 4, "prefill_batch_size": 4}
    expected, _ = decode(BatchGenerator(model, **options), prompts)
    tokens, rows = decode(Generator(model, **options), prompts)
    assert tokens == expected
    assert not any(any(row) for row in rows)  # none read them: no step kept one


def test_a_row_that_reads_logprobs_gets_them_and_only_it(engine):
    model = engine.loaded.model
    prompts = [chat_tokens(engine, question) for question in QUESTIONS]
    options = {"completion_batch_size": 4, "prefill_batch_size": 4}
    expected, _ = decode(BatchGenerator(model, **options), prompts)
    wanted: set[int] = set()
    generator = Generator(model, logprob_uids=wanted, first_uid=100, **options)
    wanted.add(100)  # the first row's uid, before it is inserted
    tokens, rows = decode(generator, prompts)
    assert tokens == expected
    assert all(rows[0]) and not any(any(row) for row in rows[1:])


def test_the_engine_gives_logprobs_beside_rows_that_do_not_ask(engine):
    prompts = [chat_tokens(engine, question) for question in QUESTIONS]
    alone = [
        generate(engine, GenerationRequest(p, max_tokens=TOKENS, logprobs=True)) for p in prompts
    ]
    runs = [
        submit(engine, GenerationRequest(p, max_tokens=TOKENS, logprobs=i == 1))
        for i, p in enumerate(prompts)
    ]
    runs = [run.wait() for run in runs]
    assert [run.text for run in runs] == [run.text for run in alone]
    with_logprobs = [entry for delta in runs[1].deltas for entry in delta.logprobs]
    assert len(with_logprobs) == runs[1].end.completion_tokens
    assert not any(delta.logprobs for delta in runs[0].deltas)
