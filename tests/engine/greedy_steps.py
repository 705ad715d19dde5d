"""One stream's greedy steps through a model and its own caches, and the comparison the
fast-path tests make of two such runs (the fast path's against mlx-lm's)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache


def greedy_steps(model, prompt: list[int], steps: int, wrap=None):
    """Each step's logits and token: the prompt, then `steps` one-token steps, over the
    model's own caches (a sliding layer's rotating one), each wrapped by `wrap` if given."""
    cache = make_prompt_cache(model)
    if wrap is not None:
        cache = [wrap(c) for c in cache]
    logits = model(mx.array([prompt]), cache=cache)[0, -1]
    all_logits, tokens = [], []
    for _ in range(steps):
        token = int(mx.argmax(logits).item())
        all_logits.append(logits)
        tokens.append(token)
        logits = model(mx.array([[token]]), cache=cache)[0, -1]
    return all_logits, tokens


def assert_same_steps(got, want, tolerance: float = 1e-3) -> None:
    """The same greedy tokens, and every step's logits within `tolerance` of the largest."""
    assert got[1] == want[1]
    for a, b in zip(got[0], want[0], strict=True):
        assert mx.abs(a - b).max().item() <= tolerance * (1.0 + mx.abs(b).max().item())
