"""A decoder reranker: mlx-lm's model reading one prompt per (query, document) pair and
scoring its last token, as Qwen3-Reranker is used.

Qwen3-Reranker is a language model trained to answer "yes" or "no" to whether a document
meets a query, in a prompt of its own. Its relevance is P(yes) over the two, which is
sigmoid(logit_yes - logit_no). Its sequence-classification conversions (a `score` head of
one row) carry that difference as the row, lm_head[yes] - lm_head[no], so both forms give
the same score. Either way only the last token's state is projected: the whole
vocabulary's logits at every position would cost the prompt's length times the vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ...protocol.embedding_folder import EmbeddingSpec
from .cross_encoders import Pair, checkpoint_weights
from .models import context_length

# The prompt the model was trained on (Qwen3-Reranker's model card): a system turn with the
# task, the instruction, query and document as the user's turn, and an empty thinking block
# opening the answer, whose first token is then "yes" or "no".
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".'
)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
PROMPT = (
    "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
    "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)


def reranker_prompt(query: str, document: str, instruction: str | None = None) -> str:
    """One pair as the model reads it."""
    return PROMPT.format(
        system=SYSTEM,
        instruction=instruction or DEFAULT_INSTRUCTION,
        query=query,
        document=document,
    )


@dataclass
class DecoderCrossEncoder:
    spec: EmbeddingSpec
    model: nn.Module
    tokenizer: object
    context_length: int
    pad_id: int
    # The relevance logit of a last state: its dot with a score head's row, or (the
    # original form) the head's "yes" logit less its "no" logit.
    score_row: mx.array | None = None
    classifier_ids: tuple[int, int] | None = None

    def pair(self, query: str, document: str, instruction: str | None = None) -> Pair:
        ids = list(self.tokenizer.encode(reranker_prompt(query, document, instruction)))
        return Pair(ids, [0] * len(ids))

    def scores(self, ids: mx.array, types: mx.array, mask: mx.array) -> np.ndarray:
        """Right-padded rows: a causal model's real tokens never read the padding after
        them, so the last real token's state is the row's own, mask or not."""
        hidden = self.model.model(ids)
        last = mask.astype(mx.int32).sum(axis=1) - 1
        states = hidden[mx.arange(hidden.shape[0]), last]
        logits = self._logits(states)
        if self.spec.score_activation == "sigmoid":
            logits = mx.sigmoid(logits)
        return np.array(logits, dtype=np.float32)

    def _logits(self, states: mx.array) -> mx.array:
        if self.score_row is not None:
            return states.astype(mx.float32) @ self.score_row
        no, yes = self.classifier_ids
        vocabulary = language_model_head(self.model)(states[:, None, :])[:, 0]
        vocabulary = vocabulary.astype(mx.float32)
        return vocabulary[:, yes] - vocabulary[:, no]


def language_model_head(model: nn.Module):
    """The model's head as mlx-lm applies it to the backbone's states: its lm_head, or the
    tied embedding read as a projection."""
    head = getattr(model, "lm_head", None)
    return head if head is not None else model.model.embed_tokens.as_linear


def _token_id(tokenizer, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int) or found == getattr(tokenizer, "unk_token_id", None):
        raise ValueError(f"the tokenizer has no single token {token!r} to score with")
    return found


def _score_row(path: Path) -> mx.array:
    score = checkpoint_weights(path).get("score.weight")
    if score is None or score.ndim != 2 or score.shape[0] != 1:
        raise ValueError("a decoder sequence classifier needs a one-row score.weight")
    return score[0].astype(mx.float32)


def load_decoder_cross_encoder(path: str | Path, spec: EmbeddingSpec) -> DecoderCrossEncoder:
    """mlx-lm's model and tokenizer, and what scores its last state."""
    from mlx_lm.utils import load_model, load_tokenizer

    path = Path(path)
    original = spec.classifier_tokens is not None
    # Not strict for a conversion: it has a score head and no lm_head.
    model, _ = load_model(path, strict=original)
    if not callable(getattr(model, "model", None)):
        raise ValueError(f"mlx-lm's {spec.model_type} model has no backbone to score with")
    tokenizer = load_tokenizer(path)
    config = json.loads((path / "config.json").read_text())
    pad_id = getattr(tokenizer, "pad_token_id", None)
    loaded = DecoderCrossEncoder(
        spec=spec,
        model=model,
        tokenizer=tokenizer,
        context_length=context_length(config, tokenizer),
        pad_id=pad_id if isinstance(pad_id, int) else 0,
    )
    if original:
        no, yes = spec.classifier_tokens
        loaded.classifier_ids = (_token_id(tokenizer, no), _token_id(tokenizer, yes))
    else:
        loaded.score_row = _score_row(path)
    mx.eval(model.parameters())
    return loaded
