"""One vector from a sequence's hidden states, as sentence-transformers' Pooling computes
it, over right-padded rows whose mask marks the real tokens."""

from __future__ import annotations

import mlx.core as mx
import numpy as np


def pool(hidden: mx.array, mask: mx.array, mode: str) -> mx.array:
    """(batch, length, width) hidden states and a (batch, length) 0/1 mask -> (batch, width).

    `mode` is "cls" (the first token), "mean" (the real tokens' mean) or "last" (the last
    real token: a causal model has read the whole input only there).
    """
    hidden = hidden.astype(mx.float32)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        weights = mask.astype(mx.float32)[..., None]
        return (hidden * weights).sum(axis=1) / mx.maximum(weights.sum(axis=1), 1.0)
    if mode == "last":
        last = mask.astype(mx.int32).sum(axis=1) - 1
        return hidden[mx.arange(hidden.shape[0]), last]
    raise ValueError(f"unknown pooling mode {mode!r}")


def finish(vectors: np.ndarray, *, dimensions: int | None, normalize: bool) -> list[bytes]:
    """Each row truncated to `dimensions` (Matryoshka), L2-normalized when the model's
    vectors are, as little-endian float32 bytes (protocol/embeddings.py)."""
    if dimensions is not None:
        vectors = vectors[:, :dimensions]
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)
    little = np.ascontiguousarray(vectors, dtype="<f4")
    return [row.tobytes() for row in little]
