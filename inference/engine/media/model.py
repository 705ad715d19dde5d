"""mlx-vlm's model as the engine calls a language model: `model(tokens, cache=...)` gives
logits, one row a sequence, whatever each row holds.

A media row's prompt reaches the language model as embeddings (the vision tower's output
merged at its image placeholders, by mlx-vlm's `get_input_embeddings`), and, for Qwen's
multimodal RoPE (mRoPE), with three position ids a token (time, height, width). Text
after an image then sits at `index + delta`, where delta (mlx-vlm's rope delta, zero or
negative) is the row's own. mlx-vlm keeps such positions on the language model object
between calls, for the one sequence its `generate` runs; a batch has many, so every call
here passes explicit positions, computed from each row's cache offset and delta: the
language model then keeps no state from one call to the next. Qwen3-VL's prefill also
passes the deepstack features of the chunk's image positions (media/rows.py).

A family whose language model makes its own caches (Gemma 3n's: sliding windows, and fewer
caches than layers, its last layers reading earlier layers' KV) has them made by it.
"""

from __future__ import annotations

import dataclasses

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
        # A family whose layers differ in their caches (sliding windows) makes its own: on
        # the model (Gemma 3n) or on its language model only (Gemma 3, as mlx-vlm's
        # generate asks it); mlx-lm's make_prompt_cache asks for it.
        for owner in (vlm, vlm.language_model):
            if hasattr(owner, "make_cache"):
                self.make_cache = owner.make_cache
                break
        # Gemma 3n scales a text token's embedding by sqrt(width) (transformers'
        # Gemma3nTextScaledWordEmbedding; mlx-vlm's Gemma3Model when it embeds ids itself),
        # and mlx-vlm 0.7.10's get_input_embeddings does not: scaled here, so that a
        # prompt's text embeds as its decode steps and a text row's own prompt do.
        self.text_scale = vlm.config.text_config.hidden_size**0.5 if _scales(vlm) else None
        _image_scale_as_transformers(vlm.config)

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
        visual_mask: mx.array | None = None,
        deepstack: mx.array | None = None,
    ) -> mx.array:
        """Logits of `inputs` (batch, length), or of their `embeddings` (batch, length,
        width) where given. mRoPE `positions` (3, batch, length) where given; otherwise each
        row's from its cache offset, plus its `position_deltas` (batch,). Qwen3-VL's
        `deepstack` features (layers, positions, width) where given, for the positions
        `visual_mask` (batch, length) marks, row after row (media/rows.py)."""
        extra = {}
        if self.mrope:
            if positions is None:
                positions = self._positions(inputs.shape, cache, position_deltas)
            extra["position_ids"] = positions
        if deepstack is not None:
            extra["visual_pos_masks"] = visual_mask
            extra["deepstack_visual_embeds"] = list(deepstack)
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

    def prompt_embeddings(self, tokens: mx.array, pixels=None, **arrays):
        """mlx-vlm's get_input_embeddings of a prompt (batch, length) and its media, the
        text positions scaled where the family scales them (text_scale)."""
        # The prompt's attention mask, as mlx-vlm's generate passes it (Gemma 3's embeddings
        # need one; a row's prompt has no padding).
        mask = mx.ones(tokens.shape, mx.int32)
        features = self.vlm.get_input_embeddings(tokens, pixels, mask=mask, **arrays)
        if self.text_scale is not None:
            text = (tokens < self.vlm.embed_vision.vocab_offset)[..., None]
            embeddings = features.inputs_embeds
            scaled = mx.where(text, embeddings * self.text_scale, embeddings)
            features = dataclasses.replace(features, inputs_embeds=scaled)
        return features

    def embed(self, tokens: mx.array) -> mx.array:
        """The embeddings of text tokens (batch, length) -> (batch, length, width), as the
        language model embeds them from their ids."""
        embeddings = self.vlm.get_input_embeddings(tokens).inputs_embeds
        return embeddings if self.text_scale is None else embeddings * self.text_scale


def _scales(vlm) -> bool:
    return getattr(vlm.config, "model_type", None) == "gemma3n"


def _image_scale_as_transformers(config) -> None:
    """Gemma 3's image features enter the residual stream as its projector gives them
    (transformers' Gemma3Model). mlx-vlm 0.7.10's divides them by the square root of the
    config's top-level hidden_size before its language model multiplies every embedding
    by the text width's: a published config has no top-level hidden_size, and mlx-vlm's
    default (2048) scales images by sqrt(width / 2048) (x1.12 for the 4B, x1.62 for the 27B).
    Its config is given the text width, which mlx-vlm reads at each call, and nothing else."""
    if getattr(config, "model_type", None) == "gemma3":
        config.hidden_size = config.text_config.hidden_size
