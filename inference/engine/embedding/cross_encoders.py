"""Encoder cross-encoders: a BERT or XLM-R sequence classifier with one label, scoring each
(query, document) pair read together as the tokenizer joins a pair (`[CLS] q [SEP] d [SEP]`,
`<s> q </s></s> d </s>`).

mlx-embeddings has the encoders but no classification heads, and its loader refuses a
checkpoint's extra `classifier.*` weights (and transformers' `bert.`/`roberta.` prefixes). So
the encoder is mlx-embeddings' model under a module named as transformers names the
classifier's parts, which loads the checkpoint's keys as they are, and the head is
transformers' own: BERT's one Linear on its pooler's output; XLM-R's Dense, tanh and
projection on the first token's state (its checkpoints have no pooler). The score is what
sentence-transformers' CrossEncoder reports: sigmoid(logit), or the logit where the config
names the identity (embedding_folder.py).
"""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ...protocol.embedding_folder import EmbeddingSpec
from .models import context_length


@dataclass(frozen=True)
class Pair:
    """One (query, document) input: its token ids and segment (token type) ids."""

    ids: list[int]
    types: list[int]


class BertClassifier(nn.Module):
    """BertForSequenceClassification: the pooled [CLS] state through one Linear."""

    def __init__(self, encoder: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.bert = encoder
        self.classifier = nn.Linear(hidden_size, 1)

    def __call__(self, ids: mx.array, types: mx.array, mask: mx.array) -> mx.array:
        """(batch, length) ids, token types and 0/1 mask -> (batch,) logits."""
        pooled = self.bert(ids, token_type_ids=types, attention_mask=mask).pooler_output
        return self.classifier(pooled)[:, 0]


class RobertaHead(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, 1)

    def __call__(self, first: mx.array) -> mx.array:
        return self.out_proj(mx.tanh(self.dense(first)))


class XLMRobertaClassifier(nn.Module):
    """XLMRobertaForSequenceClassification: the first token's state through its head."""

    def __init__(self, encoder: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.roberta = encoder
        self.classifier = RobertaHead(hidden_size)

    def __call__(self, ids: mx.array, types: mx.array, mask: mx.array) -> mx.array:
        hidden = self.roberta(ids, token_type_ids=types, attention_mask=mask).last_hidden_state
        return self.classifier(hidden[:, 0])[:, 0]


def _bert(config: dict) -> nn.Module:
    from mlx_embeddings.models import bert

    return BertClassifier(bert.Model(bert.ModelArgs.from_dict(config)), config["hidden_size"])


def _xlm_roberta(config: dict) -> nn.Module:
    from mlx_embeddings.models import xlm_roberta

    # transformers builds the classifier's encoder without a pooler: none is saved.
    args = xlm_roberta.ModelArgs.from_dict({**config, "add_pooling_layer": False})
    return XLMRobertaClassifier(xlm_roberta.Model(args), config["hidden_size"])


CLASSIFIERS = {"bert": _bert, "xlm_roberta": _xlm_roberta}


@dataclass
class CrossEncoder:
    spec: EmbeddingSpec
    model: nn.Module
    tokenizer: object
    context_length: int
    pad_id: int

    def pair(self, query: str, document: str, instruction: str | None = None) -> Pair:
        """The pair as the tokenizer joins it (an encoder takes no instruction)."""
        encoded = self.tokenizer(query, document)
        types = encoded.get("token_type_ids") or [0] * len(encoded["input_ids"])
        return Pair(list(encoded["input_ids"]), list(types))

    def scores(self, ids: mx.array, types: mx.array, mask: mx.array) -> np.ndarray:
        logits = self.model(ids, types, mask).astype(mx.float32)
        if self.spec.score_activation == "sigmoid":
            logits = mx.sigmoid(logits)
        return np.array(logits, dtype=np.float32)


def checkpoint_weights(path: Path) -> dict[str, mx.array]:
    """The folder's safetensors as saved (transformers' keys)."""
    files = glob.glob(str(path / "model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no model*.safetensors in {path}")
    weights: dict[str, mx.array] = {}
    for file in files:
        weights.update(mx.load(file))
    # position_ids is a buffer some checkpoints carry, not a weight.
    return {key: value for key, value in weights.items() if not key.endswith("position_ids")}


def load_cross_encoder(path: str | Path, spec: EmbeddingSpec) -> CrossEncoder:
    """An encoder cross-encoder folder (config, safetensors, tokenizer) loaded for scoring."""
    from transformers import AutoTokenizer

    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    model = CLASSIFIERS[spec.model_type](config)
    # Strict: a checkpoint without the head (or with other parts) fails to load.
    model.load_weights(list(checkpoint_weights(path).items()))
    model.eval()
    mx.eval(model.parameters())
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    pad_id = tokenizer.pad_token_id
    return CrossEncoder(
        spec,
        model,
        tokenizer,
        context_length(config, tokenizer),
        pad_id if isinstance(pad_id, int) else 0,
    )
