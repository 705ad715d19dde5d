"""Logprobs read for a whole step at once (sequence.read_logprobs): the values a row read
alone gives, and one read per step however many rows ask."""

from __future__ import annotations

import mlx.core as mx

from inference.engine import GenerationRequest
from inference.engine.loop import sequence as sequence_module
from inference.engine.loop.sequence import read_logprobs

from .helpers import chat_tokens, generate, submit


def one_row(row: mx.array, token: int, count: int) -> tuple[float, list[tuple[int, float]]]:
    """The row read alone, as the engine read each row before."""
    top = []
    if count:
        ids = mx.argpartition(-row, kth=count - 1)[:count]
        order = mx.argsort(-row[ids])
        top = list(zip(ids[order].tolist(), row[ids][order].tolist(), strict=True))
    return row[token].item(), top


def test_a_batch_read_gives_each_row_s_own_values():
    mx.random.seed(3)
    logits = mx.random.normal((5, 300))
    rows = list(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    tokens, counts = [0, 17, 299, 5, 120], [0, 3, 11, 1, 5]
    read = read_logprobs(rows, tokens, counts)
    for row, token, count, got in zip(rows, tokens, counts, read, strict=True):
        value, top = one_row(row, token, count)
        assert got.logprob == value and got.top == top
    assert [len(r.top) for r in read_logprobs(rows, tokens, [0] * 5)] == [0] * 5


def test_a_step_of_rows_asking_for_logprobs_reads_them_once(engine, monkeypatch):
    questions = ("Name a colour.", "Name a fruit.", "Name a planet.")
    prompts = [chat_tokens(engine, question) for question in questions]
    alone = [
        generate(engine, GenerationRequest(p, max_tokens=8, logprobs=True, top_logprobs=2))
        for p in prompts
    ]
    reads = []

    def counted(rows, tokens, counts):
        reads.append(len(rows))
        return read_logprobs(rows, tokens, counts)

    monkeypatch.setattr(sequence_module, "read_logprobs", counted)
    runs = [
        submit(engine, GenerationRequest(p, max_tokens=8, logprobs=True, top_logprobs=2))
        for p in prompts
    ]
    runs = [run.wait() for run in runs]
    entries = [[e for d in run.deltas for e in d.logprobs] for run in runs]
    assert entries == [[e for d in run.deltas for e in d.logprobs] for run in alone]
    assert max(reads) == len(prompts)  # the batch's rows, in one read
