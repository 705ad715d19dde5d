"""An embeddings request to a worker, and its answer; a rerank request, and its answer.

Vectors travel as little-endian float32 bytes, one string of bytes a vector: what
OpenAI's `encoding_format: "base64"` encodes, so the web side renders either format
without arithmetic, and msgpack carries 4 bytes a value rather than 9.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EmbedCall:
    """Inputs to embed: texts (the worker tokenizes them) or token ids, never both."""

    texts: list[str] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)
    dimensions: int | None = None  # Matryoshka truncation (then re-normalized)
    max_input_tokens: int = 8192  # an input's tokens; the model's context bounds it too


@dataclass(frozen=True)
class Embedded:
    """One vector per input, in the call's order, and the tokens they took."""

    vectors: list[bytes]
    prompt_tokens: int


def pack_vector(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def unpack_vector(packed: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(packed) // 4}f", packed))


@dataclass(frozen=True)
class RerankCall:
    """A query and the documents to score against it, each pair one cross-encoder input."""

    query: str
    documents: list[str]
    max_input_tokens: int = 8192  # a pair's tokens; the model's context bounds it too
    instruction: str | None = None  # a decoder reranker's task line; None: its default


@dataclass(frozen=True)
class Reranked:
    """One relevance score a document, in the call's order, and the tokens the pairs took."""

    scores: list[float]
    total_tokens: int
