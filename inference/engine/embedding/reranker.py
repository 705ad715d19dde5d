"""A cross-encoder reranker: a BERT sequence classifier with one label, scoring each
(query, document) pair read together as `[CLS] query [SEP] document [SEP]`.

mlx-embeddings has the BERT encoder and its pooler (the [CLS] state through a tanh Dense)
but no classification head, and its loader refuses a checkpoint's extra `classifier.*`
weights (and transformers' `bert.` prefix). So the encoder is its `bert.Model` under a
module named as transformers names BertForSequenceClassification's parts, which loads the
checkpoint's keys as they are, and the head is transformers' own: one Linear on the
pooled output. The score is what sentence-transformers' CrossEncoder reports for such a model:
sigmoid(logit), or the logit where the config names the identity (embedding_folder.py).
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ...protocol.embedding_folder import EmbeddingSpec
from ...protocol.embeddings import RerankCall
from ...protocol.model_folder import read_context_length
from .batching import plan_batches
from .embedder import EmbedderStats, InputRejected


@dataclass(frozen=True)
class Pair:
    """One (query, document) input: its token ids and segment (token type) ids."""

    ids: list[int]
    types: list[int]


class CrossEncoderHead(nn.Module):
    """mlx-embeddings' BERT with transformers' sequence-classification head."""

    def __init__(self, encoder: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.bert = encoder
        self.classifier = nn.Linear(hidden_size, 1)

    def __call__(self, ids: mx.array, types: mx.array, mask: mx.array) -> mx.array:
        """(batch, length) ids, token types and 0/1 mask -> (batch,) logits."""
        pooled = self.bert(ids, token_type_ids=types, attention_mask=mask).pooler_output
        return self.classifier(pooled)[:, 0]


@dataclass
class CrossEncoder:
    spec: EmbeddingSpec
    model: CrossEncoderHead
    tokenizer: object
    context_length: int
    pad_id: int

    def pair(self, query: str, document: str) -> Pair:
        encoded = self.tokenizer(query, document)
        types = encoded.get("token_type_ids") or [0] * len(encoded["input_ids"])
        return Pair(list(encoded["input_ids"]), list(types))

    def scores(self, ids: mx.array, types: mx.array, mask: mx.array) -> np.ndarray:
        logits = self.model(ids, types, mask).astype(mx.float32)
        if self.spec.score_activation == "sigmoid":
            logits = mx.sigmoid(logits)
        return np.array(logits, dtype=np.float32)


def _checkpoint_weights(path: Path) -> dict[str, mx.array]:
    """transformers' keys as they are: CrossEncoderHead names its parts as
    BertForSequenceClassification does (`bert.*`, `classifier.*`)."""
    files = glob.glob(str(path / "model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no model*.safetensors in {path}")
    weights: dict[str, mx.array] = {}
    for file in files:
        weights.update(mx.load(file))
    # position_ids is a buffer some checkpoints carry, not a weight.
    return {key: value for key, value in weights.items() if not key.endswith("position_ids")}


def load_cross_encoder(path: str | Path, spec: EmbeddingSpec) -> CrossEncoder:
    """A BERT cross-encoder folder (config, safetensors, tokenizer) loaded for scoring."""
    from mlx_embeddings.models import bert
    from transformers import AutoTokenizer

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    encoder = bert.Model(bert.ModelArgs.from_dict(config))
    model = CrossEncoderHead(encoder, config["hidden_size"])
    # Strict: a checkpoint without the head (or with other parts) fails to load.
    model.load_weights(list(_checkpoint_weights(path).items()))
    model.eval()
    mx.eval(model.parameters())
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    length = read_context_length(config)
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < length:
        length = declared
    pad_id = tokenizer.pad_token_id
    return CrossEncoder(spec, model, tokenizer, length, pad_id if isinstance(pad_id, int) else 0)


class Reranker:
    """Scores a call's pairs with one model, `batch_tokens` padded tokens a forward pass:
    the pairs are batched by length as embedding inputs are (batching.py)."""

    def __init__(self, model: CrossEncoder, *, name: str, batch_tokens: int) -> None:
        self.model = model
        self.name = name
        self.batch_tokens = batch_tokens
        self.stats = EmbedderStats()

    def inputs_of(self, call: RerankCall) -> list[Pair]:
        """The call's pairs; InputRejected for one longer than the model takes."""
        limit = min(call.max_input_tokens, self.model.context_length)
        pairs = [self.model.pair(call.query, document) for document in call.documents]
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
