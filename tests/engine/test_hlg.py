"""HLG tone-curve sampling in the engine: the curve's shape, one call for rows with their own
knobs, and a batch mixing HLG and plain rows on the real default model."""

from __future__ import annotations

import mlx.core as mx
import pytest

from inference.engine import GenerationRequest
from inference.engine.loop.hlg import HlgProcessor, knobs, tone_curve
from inference.engine.loop.sampling import build_logits_processors
from inference.protocol.sampling import HlgParams, SamplingParams

from .helpers import chat_tokens, generate, submit

DEFAULT = HlgParams()  # 4/4/6/6: the band is 4 to 8 below the top
DISTANCES = [i / 4 for i in range(161)]  # 0 to 40 below the top, in quarters


def shaped_distances(params: HlgParams, distances=DISTANCES) -> list[float]:
    """D(d) for each d: a row of logits -d under a top logit of 0, shaped, read back."""
    logits = -mx.array([[0.0, *distances]], mx.float32)
    return [-value for value in tone_curve(logits, knobs([params]))[0, 1:].tolist()]


def test_the_band_passes_through_and_both_ends_are_compressed():
    shaped = shaped_distances(DEFAULT)
    for d, out in zip(DISTANCES, shaped, strict=True):
        if 4 <= d <= 8:
            assert out == d  # bit for bit
        else:
            assert out > d if d < 4 else out < d  # the head pulled down, the tail up
    steps = [b - a for a, b in zip(shaped, shaped[1:], strict=False)]
    assert all(step > 0 for step in steps)  # strictly monotone: the ranking is kept
    assert all(step <= 0.25 + 1e-5 for step in steps)  # slope at most 1: it compresses
    assert steps[-1] < 0.25 / 4  # far down the toe the slope has fallen below a quarter
    # Continuous, slope 1 at both knees: just past either one nearly passes through.
    near = shaped_distances(DEFAULT, [3.99, 8.01])
    assert near == pytest.approx([3.99, 8.01], abs=1e-4)


def test_the_knobs_move_the_curve_as_documented():
    """shoulder and toe: the distance past the knee at which the slope has halved."""
    for params, knee, sign in ((HlgParams(shoulder=2), 4.0, -1), (HlgParams(toe=3), 8.0, 1)):
        knob = params.shoulder if sign < 0 else params.toe
        a, b = shaped_distances(params, [knee + sign * (knob - 0.01), knee + sign * (knob + 0.01)])
        assert abs(b - a) / 0.02 == pytest.approx(0.5, abs=1e-2)
    moved = shaped_distances(HlgParams(pivot_offset=10, width=2), [9.5, 10.5, 11.5])
    assert moved[:2] == [9.5, 10.5] and moved[2] < 11.5


def test_the_top_token_stays_the_top_and_a_masked_one_stays_masked():
    logits = mx.array([[2.0, -mx.inf, 9.5, -30.0, 9.0]])
    shaped = HlgProcessor(DEFAULT)(mx.array([1]), logits)
    assert mx.argmax(shaped).item() == 2
    assert shaped[0, 1].item() == -mx.inf
    assert not mx.isnan(shaped).any().item()


def test_one_call_shapes_each_row_by_its_own_knobs():
    rows = [DEFAULT, HlgParams(width=0, shoulder=1, toe=20, pivot_offset=2), HlgParams(width=200)]
    logits = mx.random.normal((3, 4096), key=mx.random.key(0)) * 6
    together = tone_curve(logits, knobs(rows))
    for i, params in enumerate(rows):
        alone = tone_curve(logits[i : i + 1], knobs([params]))
        assert mx.array_equal(together[i : i + 1], alone).item()
    assert mx.array_equal(together[2], logits[2]).item()  # a band wider than the row: as it came


def test_the_curve_comes_after_the_grammar_and_only_when_on():
    def grammar(tokens, logits):
        return logits

    plain = build_logits_processors(SamplingParams(logit_bias={5: 1.0}), grammar)
    assert plain[-1] is grammar and len(plain) == 2
    with_hlg = build_logits_processors(SamplingParams(logit_bias={5: 1.0}, hlg=DEFAULT), grammar)
    assert with_hlg[-2] is grammar and isinstance(with_hlg[-1], HlgProcessor)


def request(engine, prompt: str, **sampling) -> GenerationRequest:
    return GenerationRequest(
        chat_tokens(engine, prompt), max_tokens=10, sampling=SamplingParams(**sampling)
    )


def test_a_batch_mixing_hlg_and_plain_rows_gives_each_row_what_it_would_alone(engine):
    rows = [
        request(engine, "Invent a name for a cat.", temperature=1.0, seed=11),
        request(engine, "Invent a name for a cat.", temperature=1.0, seed=11, hlg=DEFAULT),
        request(engine, "Name a sea creature.", temperature=0.8, seed=3, hlg=HlgParams(toe=2)),
        request(engine, "Name a sea creature.", hlg=DEFAULT),  # greedy: the ranking is kept
        request(engine, "Name a sea creature."),
    ]
    alone = [generate(engine, row).text for row in rows]
    together = [submit(engine, row) for row in rows]
    assert [run.wait().text for run in together] == alone
    assert alone[0] != alone[1]  # the same seed and temperature, HLG on and off
    assert alone[3] == alone[4]
