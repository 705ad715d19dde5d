"""An embeddings call served: inputs checked and tokenized, run in length-bucketed batches,
each vector truncated and normalized as asked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ...protocol.embedding_folder import MODEL_POOLING
from ...protocol.embeddings import EmbedCall
from .batching import plan_batches
from .models import EmbeddingModel
from .pooling import finish


class InputRejected(Exception):
    """An input the model cannot take: a client error, with its field and code."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass
class EmbedderStats:
    forward_passes: int = 0
    inputs: int = 0
    tokens: int = 0
    padded_tokens: int = 0  # tokens run, padding included: the batches' cost


class Embedder:
    """Embeds token lists with one model, `batch_tokens` padded tokens a forward pass."""

    def __init__(self, model: EmbeddingModel, *, name: str, batch_tokens: int) -> None:
        self.model = model
        self.name = name
        self.batch_tokens = batch_tokens
        self.stats = EmbedderStats()

    def inputs_of(self, call: EmbedCall) -> list[list[int]]:
        """The call's inputs as token lists; InputRejected for one the model cannot take."""
        limit = min(call.max_input_tokens, self.model.context_length)
        inputs = [self.model.encode(text) for text in call.texts] or call.token_ids
        for index, tokens in enumerate(inputs):
            if not tokens:
                raise InputRejected(f"input[{index}] has no tokens")
            if len(tokens) > limit:
                raise InputRejected(
                    f"input[{index}] is {len(tokens)} tokens; {self.name} takes at most {limit} "
                    "tokens an input",
                    code="context_length_exceeded",
                )
            if call.token_ids and not all(0 <= token < self.model.vocab_size for token in tokens):
                raise InputRejected(
                    f"input[{index}] has a token id outside {self.name}'s vocabulary "
                    f"(0 to {self.model.vocab_size - 1})"
                )
        return inputs

    def vectors(
        self, inputs: list[list[int]], between: Callable[[], None] | None = None
    ) -> np.ndarray:
        """One pooled float32 row per input, in their order; `between` runs after each
        forward pass (the worker answers its socket there)."""
        rows: np.ndarray | None = None
        for batch in plan_batches([len(tokens) for tokens in inputs], max_tokens=self.batch_tokens):
            ids = np.full((len(batch.indices), batch.length), self.model.pad_id, dtype=np.int32)
            mask = np.zeros(ids.shape, dtype=np.int32)
            for row, index in enumerate(batch.indices):
                tokens = inputs[index]
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1
            pooled = np.array(self.model.pooled(mx.array(ids), mx.array(mask)), dtype=np.float32)
            if rows is None:
                rows = np.zeros((len(inputs), pooled.shape[1]), dtype=np.float32)
            rows[list(batch.indices)] = pooled
            self.stats.forward_passes += 1
            self.stats.padded_tokens += batch.padded_tokens
            if between is not None:
                between()
        self.stats.inputs += len(inputs)
        self.stats.tokens += sum(len(tokens) for tokens in inputs)
        return rows if rows is not None else np.zeros((0, self.model.spec.dimension), np.float32)

    def finish(self, vectors: np.ndarray, dimensions: int | None) -> list[bytes]:
        """The rows as the call asked: truncated to `dimensions`, then re-normalized if the
        model's vectors are normalized (mlx-embeddings' own are already, untruncated)."""
        spec = self.model.spec
        renormalize = spec.normalize and (dimensions is not None or spec.pooling != MODEL_POOLING)
        return finish(vectors, dimensions=dimensions, normalize=renormalize)
