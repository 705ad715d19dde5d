"""A reranker served: a call's (query, document) pairs scored in length-bucketed batches
(batching.py), by an encoder cross-encoder (cross_encoders.py) or a decoder that scores a
prompt's last token (decoder_reranker.py), whichever the folder is (embedding_folder.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from ...protocol.embedding_folder import DECODER, EmbeddingSpec
from ...protocol.embeddings import RerankCall
from .batching import plan_batches
from .cross_encoders import CrossEncoder, Pair, load_cross_encoder
from .decoder_reranker import DecoderCrossEncoder, load_decoder_cross_encoder
from .embedder import EmbedderStats, InputRejected


def load_reranker(path: str | Path, spec: EmbeddingSpec) -> CrossEncoder | DecoderCrossEncoder:
    """The folder's scoring model, loaded by the library its spec names."""
    if spec.backend == DECODER:
        return load_decoder_cross_encoder(path, spec)
    return load_cross_encoder(path, spec)


class Reranker:
    """Scores a call's pairs with one model, `batch_tokens` padded tokens a forward pass:
    the pairs are batched by length as embedding inputs are (batching.py)."""

    def __init__(
        self, model: CrossEncoder | DecoderCrossEncoder, *, name: str, batch_tokens: int
    ) -> None:
        self.model = model
        self.name = name
        self.batch_tokens = batch_tokens
        self.stats = EmbedderStats()

    def inputs_of(self, call: RerankCall) -> list[Pair]:
        """The call's pairs; InputRejected for one longer than the model takes."""
        limit = min(call.max_input_tokens, self.model.context_length)
        pairs = [self.model.pair(call.query, doc, call.instruction) for doc in call.documents]
        for index, pair in enumerate(pairs):
            if len(pair.ids) > limit:
                raise InputRejected(
                    f"documents[{index}] with the query is {len(pair.ids)} tokens; "
                    f"{self.name} takes at most {limit} tokens a pair",
                    code="context_length_exceeded",
                )
        return pairs

    def vectors(self, pairs: list[Pair], between: Callable[[], None] | None = None) -> np.ndarray:
        """A (pairs, 1) column of scores, in their order; `between` runs after each pass."""
        scores = np.zeros((len(pairs), 1), dtype=np.float32)
        for batch in plan_batches([len(p.ids) for p in pairs], max_tokens=self.batch_tokens):
            shape = (len(batch.indices), batch.length)
            ids = np.full(shape, self.model.pad_id, dtype=np.int32)
            types = np.zeros(shape, dtype=np.int32)
            mask = np.zeros(shape, dtype=np.int32)
            for row, index in enumerate(batch.indices):
                pair = pairs[index]
                ids[row, : len(pair.ids)] = pair.ids
                types[row, : len(pair.types)] = pair.types
                mask[row, : len(pair.ids)] = 1
            scored = self.model.scores(mx.array(ids), mx.array(types), mx.array(mask))
            scores[list(batch.indices), 0] = scored
            self.stats.forward_passes += 1
            self.stats.padded_tokens += batch.padded_tokens
            if between is not None:
                between()
        self.stats.inputs += len(pairs)
        self.stats.tokens += sum(len(p.ids) for p in pairs)
        return scores
