"""An embedding model loaded: tokens in, one pooled vector per row out.

An encoder is mlx-embeddings' model (`mlx_embeddings.load`): it takes an attention mask,
and gives its own pooled, normalized `text_embeds` beside `last_hidden_state`. A decoder is
mlx-lm's (`mlx_lm.load`): its backbone, `model.model`, gives the final hidden states before
the language-model head, which is what sentence-transformers pools (as transformers'
AutoModel would). Rows are padded on the right: a causal model's real tokens never attend
to the padding after them, so it needs no mask.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx

from ...protocol.embedding_folder import DECODER, MODEL_POOLING, EmbeddingSpec
from ...protocol.model_folder import read_context_length
from .pooling import pool

# A tokenizer's model_max_length above this is transformers' "no limit" sentinel.
UNBOUNDED_TOKENIZER_LENGTH = 10**9


@dataclass
class EmbeddingModel:
    """The model, its tokenizer and what bounds its inputs."""

    spec: EmbeddingSpec
    model: object
    tokenizer: object
    context_length: int
    vocab_size: int
    pad_id: int

    def encode(self, text: str) -> list[int]:
        """The model's tokens for `text`, with the special tokens its tokenizer adds (not
        verbose: an input too long for the model is the caller's 400, not a log warning)."""
        return list(self.tokenizer.encode(text, verbose=False))

    def pooled(self, ids: mx.array, mask: mx.array) -> mx.array:
        """(batch, length) right-padded ids and their 0/1 mask -> (batch, width) float32."""
        if self.spec.backend == DECODER:
            return pool(self.model.model(ids), mask, self.spec.pooling)
        output = self.model(ids, attention_mask=mask)
        if self.spec.pooling == MODEL_POOLING:
            return output.text_embeds.astype(mx.float32)
        return pool(output.last_hidden_state, mask, self.spec.pooling)


def context_length(config: dict, tokenizer) -> int:
    """The config's context, or the tokenizer's if shorter: XLM-R's config counts two
    padding positions its inputs cannot use."""
    length = read_context_length(config)
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < UNBOUNDED_TOKENIZER_LENGTH:
        length = min(length, declared)
    return length


def load_embedding_model(path: str | Path, spec: EmbeddingSpec) -> EmbeddingModel:
    """Load the folder with the library its spec names."""
    path = Path(path)
    if spec.backend == DECODER:
        from mlx_lm import load

        model, tokenizer = load(str(path))
        if not callable(getattr(model, "model", None)):
            raise ValueError(f"mlx-lm's {spec.model_type} model has no backbone to embed with")
    else:
        from mlx_embeddings import load

        model, tokenizer = load(str(path))
    config = json.loads((path / "config.json").read_text())
    vocab_size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    pad_id = getattr(tokenizer, "pad_token_id", None)
    mx.eval(model.parameters())
    return EmbeddingModel(
        spec=spec,
        model=model,
        tokenizer=tokenizer,
        context_length=context_length(config, tokenizer),
        vocab_size=int(vocab_size or len(tokenizer.vocab)),
        pad_id=pad_id if isinstance(pad_id, int) else 0,
    )
