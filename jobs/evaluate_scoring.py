# ruff: noqa: E402, I001  (the process is prepared before anything imports mlx.core)
"""The evaluate job's worker side: tokens made once, then each variant scored on them.

Examples of mlx-lm's formats become tokens through its own dataset classes with
`mask_prompt`, so the scored tokens are those a prompt-masked finetune learns from (the
last reply and the end of turn after it). An answer-carrying example is its prompt
through the chat template, up to the assistant's turn, then the answer's own tokens,
which are the ones scored. Losses are mlx-lm's `default_loss` computed per row, with
its padding slip fixed (see `sequence_nll`).
"""

from __future__ import annotations

from inference.engine.process.startup import prepare_mlx_process

# A job worker's child prepared itself (mlxlab/celery.py); a process importing this
# module for its own use must be, too, before mlx.core comes in below.
prepare_mlx_process()

import functools
import gc
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.generate import generate
from mlx_lm.tuner.datasets import create_dataset

from inference.engine import load_model
from inference.engine.acceleration.adapters import activate, load_adapter
from inference.protocol.adapters import AdapterRef
from inference.engine.acceleration.dense_weights import FastPathOptions
from labsettings import lab_settings

from .context import JobContext
from .eval_examples import (
    EXACT_ANSWER,
    MULTIPLE_CHOICE,
    PERPLEXITY_ONLY,
    example_kind,
    is_exact_match,
    prompt_messages,
)

# mlx-lm's default max_seq_length: longer examples of its formats are cut there, as its
# trainer cuts them. Answer-carrying examples are never cut: that could cut the answer.
MAX_SEQ_TOKENS = 2048
# Room for what may follow a right answer: a full stop, the end of the turn.
ANSWER_SLACK_TOKENS = 4
# Padded tokens scored in one forward pass. Measured on the shipped set (bench/eval_speed.py):
# 512 scored fastest; 1,024 to 4,096 were slower, as the float32 logits over a
# 49,152-token vocabulary grow with every token of the pass.
SCORE_TOKENS = 512


@dataclass(frozen=True)
class Item:
    """One example as tokens: a sequence per choice (one for other examples), each
    with the offset where its scored tokens start."""

    kind: str
    sequences: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    reference: int = 0  # the sequence perplexity counts: the right choice, or the only one
    answer: str | None = None  # an exact-answer example's answer
    prompt: tuple[int, ...] = ()  # and its generation prompt
    max_tokens: int = 0


@dataclass
class Score:
    """What one variant made of one example."""

    kind: str
    nll: float  # summed over the reference sequence's scored tokens
    tokens: int  # how many tokens that is
    passed_tokens: int  # tokens run through the model to score it (padding excluded)
    seconds: float  # spent scoring them (a generation is not scoring)
    correct: bool | None = None  # None: the example carries no answer
    output: str | None = None  # an exact-answer example's generation


def tokenize(example: dict, tokenizer) -> Item:
    """The example's tokens: mlx-lm's dataset classes read its formats; an answer-carrying
    example is its templated prompt, then each choice's (or the answer's) tokens."""
    kind = example_kind(example)
    if kind == PERPLEXITY_ONLY:
        # Prompt masking where mlx-lm has it: text examples are scored whole.
        config = types.SimpleNamespace(mask_prompt="text" not in example)
        tokens, offset = create_dataset([example], tokenizer, config).process(example)
        return Item(kind, (_cut(tokens),), (offset,))
    # An answer is scored as the reply's own tokens right after the prompt, without the
    # end of turn the template would add: a one-word reply ending the turn at once is
    # unlikely under any choice, and that would drown the choices' differences.
    prompt = tuple(
        tokenizer.apply_chat_template(
            prompt_messages(example["prompt"]), add_generation_prompt=True, return_dict=False
        )
    )
    completions = example["choices"] if kind == MULTIPLE_CHOICE else [example["answer"]]
    sequences = tuple((*prompt, *_encode(tokenizer, text)) for text in completions)
    offsets = (len(prompt),) * len(sequences)
    if kind == MULTIPLE_CHOICE:
        return Item(kind, sequences, offsets, reference=example["answer"])
    answer_tokens = len(_encode(tokenizer, example["answer"]))
    return Item(
        kind, sequences, offsets, answer=example["answer"], prompt=prompt,
        max_tokens=answer_tokens + ANSWER_SLACK_TOKENS,
    )  # fmt: skip


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def _cut(tokens: list[int]) -> tuple[int, ...]:
    return tuple(tokens[:MAX_SEQ_TOKENS])


def sequence_nll(model, sequences, offsets) -> list[tuple[float, int]]:
    """For each sequence, the summed negative log-likelihood of its tokens from its offset
    on, and their count; all in one right-padded batch.

    This is mlx-lm's `default_loss` (tuner/trainer.py) reduced per row instead of over
    the batch, in float32 as its perplexity script does, with one change: its mask
    `steps <= length` also scores the first padding position of every shorter row
    (mlx-lm pull request 1697); `steps < length` scores exactly the row's own tokens,
    so a sequence's score does not depend on what it is batched with.
    """
    lengths = [len(sequence) for sequence in sequences]
    batch = np.zeros((len(sequences), max(lengths)), np.int32)
    for row, sequence in enumerate(sequences):
        batch[row, : len(sequence)] = sequence
    batch = mx.array(batch)
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = model(inputs).astype(mx.float32)
    steps = mx.arange(1, targets.shape[1] + 1)
    bounds = mx.array([[offset, length] for offset, length in zip(offsets, lengths, strict=True)])
    mask = mx.logical_and(steps >= bounds[:, 0:1], steps < bounds[:, 1:])
    losses = (nn.losses.cross_entropy(logits, targets) * mask).sum(axis=1)
    counts = mask.sum(axis=1)
    mx.eval(losses, counts)
    return list(zip(losses.tolist(), counts.tolist(), strict=True))


def best_choice(scores: list[tuple[float, int]]) -> int:
    """The choice with the highest log-likelihood (the lowest summed NLL); the first on a tie."""
    return min(range(len(scores)), key=lambda index: scores[index][0])


def score_batch(model, items: list[Item]) -> list[list[tuple[float, int]]]:
    """Per item, each of its sequences' (nll, count), several examples to a forward pass.

    One example at a time left the model a row or four per pass; mlx-lm's perplexity
    script runs 8 rows a pass. Rows are scored alone (`sequence_nll`), so grouping
    changes no figure beyond float rounding.
    """
    rows = [
        (sequence, offset)
        for item in items
        for sequence, offset in zip(item.sequences, item.offsets, strict=True)
    ]
    flat = sequence_nll(model, [row[0] for row in rows], [row[1] for row in rows])
    results, start = [], 0
    for item in items:
        results.append(flat[start : start + len(item.sequences)])
        start += len(item.sequences)
    return results


def batches(items: list[Item], tokens: int = SCORE_TOKENS) -> list[list[int]]:
    """The items' indices grouped for one forward pass each, shortest first.

    Similar lengths together waste little on padding; a pass holds up to `tokens`
    padded tokens, and an example's choices always share a pass.
    """
    order = sorted(range(len(items)), key=lambda index: _longest(items[index]))
    groups: list[list[int]] = []
    for index in order:
        if groups:
            rows = sum(len(items[i].sequences) for i in groups[-1]) + len(items[index].sequences)
            if rows * _longest(items[index]) <= tokens:
                groups[-1].append(index)
                continue
        groups.append([index])
    return groups


def _passed(item: Item) -> int:
    """Tokens run through the model to score the item, padding excluded."""
    return sum(len(sequence) - 1 for sequence in item.sequences)


def _longest(item: Item) -> int:
    return max(len(sequence) for sequence in item.sequences)


def figures_of(model, tokenizer, item: Item, results, seconds: float) -> Score:
    """An example's Score from its sequences' losses; an exact answer is generated now."""
    nll, tokens = results[item.reference]
    figures = Score(item.kind, nll, tokens, _passed(item), seconds)
    if item.kind == MULTIPLE_CHOICE:
        figures.correct = best_choice(results) == item.reference
    elif item.kind == EXACT_ANSWER:
        figures.output = greedy_answer(model, tokenizer, item)
        figures.correct = is_exact_match(figures.output, item.answer)
    return figures


def greedy_answer(model, tokenizer, item: Item) -> str:
    # mlx-lm samples greedily without a sampler; it stops at the end-of-turn token.
    return generate(model, tokenizer, list(item.prompt), max_tokens=item.max_tokens)


@dataclass
class VariantRun:
    """One variant's scores, and the peak memory while it was scored."""

    variant: dict
    scores: list[Score] = field(default_factory=list)
    peak_memory_bytes: int = 0


@dataclass
class _Loaded:
    path: str
    model: object
    tokenizer: object
    adapters: set[str] = field(default_factory=set)


class _Loader:
    """Loads each variant's model, keeping it while the next variant has the same one:
    adapters are switched on it as the server switches them, without a reload."""

    def __init__(self) -> None:
        self.loaded: _Loaded | None = None

    def load(self, variant: dict) -> _Loaded:
        if self.loaded is None or self.loaded.path != variant["model_path"]:
            self.release()
            # Loaded as the model workers load it: on the CPU, quantized weights run on
            # the quantized kernel or dequantized (the fast path), far faster than MLX's.
            options = FastPathOptions(
                enabled=lab_settings.cpu_fast_path,
                dense_weight_budget_bytes=lab_settings.dense_weight_budget_mb << 20,
                weights=lab_settings.cpu_weights,
            )
            model = load_model(variant["model_path"], fast_path=options)
            self.loaded = _Loaded(variant["model_path"], model.model, model.tokenizer)
        for adapter in variant["adapters"]:
            if adapter["name"] not in self.loaded.adapters:
                load_adapter(self.loaded.model, AdapterRef(adapter["name"], adapter["path"]))
                self.loaded.adapters.add(adapter["name"])
        activate(self.loaded.model, tuple(adapter["name"] for adapter in variant["adapters"]))
        return self.loaded

    def release(self) -> None:
        self.loaded = None
        gc.collect()
        mx.clear_cache()


class _Clock:
    """Progress and ETA over every (variant, example) pair."""

    def __init__(self, ctx: JobContext, total: int) -> None:
        self.ctx, self.total, self.done = ctx, max(total, 1), 0
        self.started = time.monotonic()

    def report(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        # Time per example so far, model loads included: each variant has one.
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        self.ctx.progress(self.done / self.total, message, eta_seconds=eta)


@functools.cache
def bits_per_weight(model_path: str) -> float:
    """The stored model's size per weight, as mlx-lm reports it (an adapter's few weights
    are left out): read from the folder, since the fast path runs the weights dense."""
    from mlx_lm.utils import compute_bits_per_weight, load_model as load_mlx_model

    model, _ = load_mlx_model(Path(model_path), lazy=True)  # shapes and dtypes, no values
    return round(compute_bits_per_weight(model), 3)


def variant_label(variant: dict) -> str:
    return f"{variant['model']} + {variant['adapter']}" if variant["adapter"] else variant["model"]


def evaluate_variants(ctx: JobContext, variants: list[dict], examples: list[dict]) -> list:
    """Every variant scored on every example, on the same tokens; a VariantRun each."""
    clock, loader = _Clock(ctx, len(variants) * len(examples)), _Loader()
    items: list[Item] | None = None
    runs = []
    try:
        for variant in variants:
            clock.report(f"loading {variant_label(variant)}")
            loaded = loader.load(variant)
            items = _same_tokens(items, examples, loaded.tokenizer, variant)
            runs.append(_run_variant(ctx, clock, loaded, variant, items))
    finally:
        loader.release()
    return runs


def _same_tokens(items, examples: list[dict], tokenizer, variant: dict) -> list[Item]:
    """The examples' tokens under this variant's tokenizer, checked to be the first's."""
    mine = [tokenize(example, tokenizer) for example in examples]
    if items is not None and mine != items:
        raise ValueError(
            f"{variant_label(variant)} tokenizes the examples differently from the first"
            " variant: their figures would not compare (evaluate variants of one model)"
        )
    return mine


def _run_variant(ctx: JobContext, clock: _Clock, loaded: _Loaded, variant, items) -> VariantRun:
    label, run = variant_label(variant), VariantRun(variant)
    mx.reset_peak_memory()  # the variant's own peak: its weights and its scoring
    scores: dict[int, Score] = {}
    for group in batches(items):
        ctx.check_cancelled()
        started = time.perf_counter()
        losses = score_batch(loaded.model, [items[index] for index in group])
        seconds = time.perf_counter() - started
        passed = sum(_passed(items[index]) for index in group)
        for index, results in zip(group, losses, strict=True):
            item = items[index]
            share = seconds * _passed(item) / passed
            scores[index] = figures_of(loaded.model, loaded.tokenizer, item, results, share)
            clock.done += 1
            clock.report(f"{label}: example {len(scores)} of {len(items)}")
    run.scores = [scores[index] for index in range(len(items))]
    run.peak_memory_bytes = mx.get_peak_memory()
    return run
