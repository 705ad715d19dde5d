"""mlx-vlm's model as the engine calls a language model: `model(tokens, cache=...)` gives
logits, one row a sequence, whatever each row holds.

A media row's prompt reaches the language model as embeddings (the vision tower's output
merged at its image placeholders, by mlx-vlm's `get_input_embeddings`), and, for Qwen's
multimodal RoPE (mRoPE), with three position ids a token (time, height, width). Text
after an image then sits at `index + delta`, where delta (mlx-vlm's rope delta, zero or
negative) is the row's own. mlx-vlm keeps such positions on the language model object
between calls, for the one sequence its `generate` runs; a batch has many, so every call
here passes explicit positions, computed from each row's cache offset and delta: the
language model then keeps no state from one call to the next.
"""

from __future__ import annotations

import mlx.core as mx


class VisionLanguageModel:
    """A loaded mlx-vlm model (its `Model`), called as the engine calls mlx-lm's."""

    def __init__(self, vlm) -> None:
        self.vlm = vlm
        self.language_model = vlm.language_model
        self.config = vlm.config
        # Qwen-style models return a rope delta with their embeddings: their positions
        # are three a token, and each row's are passed explicitly.
        probe = vlm.get_input_embeddings(mx.array([[0]]))
        self.mrope = probe.rope_deltas is not None

    @property
    def layers(self) -> list:
        return self.vlm.layers

    def __call__(
        self,
        inputs: mx.array,
        cache: list | None = None,
        *,
        embeddings: mx.array | None = None,
        positions: mx.array | None = None,
        position_deltas: mx.array | None = None,
    ) -> mx.array:
        """Logits of `inputs` (batch, length), or of their `embeddings` (batch, length,
        width) where given. mRoPE `positions` (3, batch, length) where given; otherwise each
        row's from its cache offset, plus its `position_deltas` (batch,)."""
        extra = {}
        if self.mrope:
            if positions is None:
                positions = self._positions(inputs.shape, cache, position_deltas)
            extra["position_ids"] = positions
        output = self.language_model(inputs, inputs_embeds=embeddings, cache=cache, **extra)
        return output.logits

    def _positions(self, shape, cache, deltas) -> mx.array:
        batch, length = shape
        offset = cache[0].offset if cache else 0  # an array (a row's) for a batch cache
        offset = offset if isinstance(offset, mx.array) else mx.array([offset] * batch)
        if deltas is not None:
            offset = offset + deltas
        positions = offset.reshape(-1, 1) + mx.arange(length)
        return mx.broadcast_to(positions[None], (3, batch, length))

    def embed(self, tokens: mx.array) -> mx.array:
        """The embeddings of text tokens (batch, length) -> (batch, length, width)."""
        return self.vlm.get_input_embeddings(tokens).inputs_embeds
