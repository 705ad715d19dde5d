"""HLG tone-curve sampling: a logits processor that reshapes a distribution by each logit's
distance below the top one, as a film curve reshapes exposure.

With d = top - logit (0 for the top token), the pivot at c = pivot_offset below the top
and h = width / 2, the curve D(d) is

    D(d) = d                                   c - h <= d <= c + h   (pass-through)
    D(d) = (c - h) - s * ln(1 + (c - h - d) / s)          d < c - h   (shoulder, the head)
    D(d) = (c + h) + t * ln(1 + (d - c - h) / t)          d > c + h   (toe, the tail)

with s = shoulder and t = toe, and the new logit is top - D(d). The shoulder is the end
nearest the top logit (a film curve's highlights), the toe the far tail (its shadows).
D is continuous and strictly increasing, with slope 1 on both sides of each knee, so
the order of the tokens never changes (greedy decoding is unaffected) and a masked token
(-inf) stays masked. Past a knee the slope falls as 1 / (1 + excess / knob): a knob is how
far past its knee the slope has halved. The shoulder brings the head's logits closer
together (the top token gives up mass to the next few); the toe brings the tail's closer
to the band, logarithmically, so far-tail tokens gain mass (min_p and top_p, applied after,
cut them off again). Logits within the band are returned as they came, bit for bit.

The knobs reach the curve as arrays, one row of (width, shoulder, toe, pivot_offset)
per row of logits, so one call can shape a batch whose rows differ; the engine calls it
per row, as a processor of that row (sampling.build_logits_processors).
"""

from __future__ import annotations

import mlx.core as mx

from ...protocol.sampling import HLG_KNOBS, HlgParams


def knobs(params: list[HlgParams]) -> mx.array:
    """(rows, 4) float32: each row's width, shoulder, toe and pivot_offset."""
    return mx.array([[getattr(p, name) for name in HLG_KNOBS] for p in params], mx.float32)


def tone_curve(logits: mx.array, knobs: mx.array) -> mx.array:
    """`logits` (rows, vocabulary) reshaped row by row by `knobs` (rows, 4), in their dtype."""
    z = logits.astype(mx.float32)
    width, shoulder, toe, offset = (knobs[:, i : i + 1] for i in range(4))
    top = z.max(axis=-1, keepdims=True)
    distance = top - z
    upper, lower = offset - width / 2, offset + width / 2  # the band's edges, as distances
    # mx.where evaluates both branches: each is clamped to its own side, so no token reaches
    # a log with a negative argument. log(1 + x), not log1p: on MLX's CPU backend log1p
    # costs 4x as much, and for x >= 0 the difference is within float32's rounding.
    head = upper - shoulder * mx.log(1 + mx.maximum(upper - distance, 0) / shoulder)
    tail = lower + toe * mx.log(1 + mx.maximum(distance - lower, 0) / toe)
    shaped = mx.where(distance < upper, top - head, mx.where(distance > lower, top - tail, z))
    return shaped.astype(logits.dtype)


# One fused graph for the dozen element-wise operations: the knobs are arrays, so every
# setting shares the compiled function instead of compiling one per value.
_compiled = mx.compile(tone_curve)


class HlgProcessor:
    """An mlx-lm logits processor (tokens, logits) -> logits for one request's row."""

    def __init__(self, params: HlgParams) -> None:
        self.params = params
        self._knobs = knobs([params])

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        return _compiled(logits, self._knobs)
