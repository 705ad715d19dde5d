"""A media row's prefill inputs, and a chunk's or a step's for the rows of a batch.

A media row prefills embeddings, not token ids: its prompt's, computed once when it joins
(the vision tower's output merged at its placeholders), with, for mRoPE models, its
positions. Text rows of the same model in the same chunk prefill their tokens' own
embeddings at plain positions, side by side with it. Once a row's prompt is in, only the
offset of its positions is left (its rope delta): decode steps feed tokens.

Qwen3-VL's vision tower gives more than the embeddings: deepstack features, taken from
its intermediate blocks, which its language model adds to the hidden states of the
image's positions after each of its first layers. A chunk passes those of the positions
it prefills, row after row, with a mask of which of its columns they are.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import mlx.core as mx

from .prompt import MediaPrompt


@dataclass
class RowMedia:
    """What a media row prefills: every token's embedding and (mRoPE) positions."""

    embeddings: mx.array  # (tokens, width)
    positions: mx.array | None  # (3, tokens); None where positions are the plain ones
    delta: int  # a position less its index, past the prompt (mRoPE's rope delta)
    # Qwen3-VL's: the prompt's image positions, in order, and their deepstack features
    # (layers, positions, width); none for the other families.
    visual: list[int] = field(default_factory=list)
    deepstack: mx.array | None = None


def row_media(model, tokens: list[int], media: MediaPrompt) -> RowMedia:
    """The embeddings and positions of `tokens` (a prompt, and any tokens replayed after
    it), its images (clips) run through the vision (audio) tower: mlx-vlm's
    get_input_embeddings, as its own generate computes them (model.py: Gemma 3n's text
    scaled)."""
    arrays = {name: mx.array(value) for name, value in media.arrays.items()}
    pixels = arrays.pop("pixel_values", None)
    features = model.prompt_embeddings(mx.array([tokens]), pixels, **arrays)
    positions = features.position_ids
    delta = 0 if features.rope_deltas is None else int(features.rope_deltas.reshape(-1)[0].item())
    if positions is not None:
        positions = positions[:, 0, :]
    embeddings = features.inputs_embeds[0]
    mx.eval(embeddings, *(() if positions is None else (positions,)))
    media = RowMedia(embeddings, positions, delta)
    if features.deepstack_visual_embeds is not None:
        media.deepstack = mx.stack(list(features.deepstack_visual_embeds))
        media.visual = [i for i, seen in enumerate(features.visual_pos_masks[0].tolist()) if seen]
        mx.eval(media.deepstack)
    return media


def prefill_inputs(model, rows: list, starts: list[int], pieces: list[list[int]]) -> dict:
    """The model call's extra inputs for one prefill chunk: {} where no row has media,
    else every row's embeddings and (mRoPE) positions, right-padded to the widest piece."""
    if not any(row.media is not None for row in rows):
        return {}
    width = max(map(len, pieces))
    embeddings, positions = [], []
    for row, start, piece in zip(rows, starts, pieces, strict=True):
        pad = width - len(piece)
        if row.media is None:
            row_embeddings = model.embed(mx.array([piece + [0] * pad]))[0]
            row_positions = mx.broadcast_to(mx.arange(start, start + width), (3, width))
        else:
            end = start + len(piece)
            row_embeddings = row.media.embeddings[start:end]
            if pad:
                padding = mx.zeros((pad, row_embeddings.shape[1]), row_embeddings.dtype)
                row_embeddings = mx.concatenate([row_embeddings, padding])
            row_positions = _media_positions(row.media, start, end, pad)
        embeddings.append(row_embeddings)
        positions.append(row_positions)
    extra = {"embeddings": mx.stack(embeddings)}
    if model.mrope:
        extra["positions"] = mx.stack(positions, axis=1)
    return extra | _deepstack_inputs(rows, starts, pieces, width)


def _deepstack_inputs(rows: list, starts: list[int], pieces: list[list[int]], width: int) -> dict:
    """A chunk's deepstack inputs: which of its columns are image positions (batch, width),
    and their features, row after row (layers, positions, width), as mlx-vlm's Qwen3-VL
    takes them; {} where the chunk prefills no image position of a Qwen3-VL row."""
    masks, features = [], []
    for row, start, piece in zip(rows, starts, pieces, strict=True):
        mask = [False] * width
        media = row.media
        if media is not None and media.deepstack is not None:
            first = bisect_left(media.visual, start)
            last = bisect_left(media.visual, start + len(piece))
            for position in media.visual[first:last]:
                mask[position - start] = True
            if last > first:
                features.append(media.deepstack[:, first:last])
        masks.append(mask)
    if not features:
        return {}
    return {"visual_mask": mx.array(masks), "deepstack": mx.concatenate(features, axis=1)}


def _media_positions(media: RowMedia, start: int, end: int, pad: int) -> mx.array:
    if media.positions is None:
        plain = mx.arange(start, end + pad)
        return mx.broadcast_to(plain, (3, end + pad - start))
    positions = media.positions[:, start:end].astype(mx.int32)
    if pad:  # padding's positions are never attended to; any will do
        last = positions[:, -1:]
        positions = mx.concatenate([positions, last + mx.arange(1, pad + 1)], axis=1)
    return positions


def step_inputs(rows: list) -> dict:
    """The model call's extra inputs for a step feeding one token a row: each row's position
    delta, where any is not zero."""
    deltas = [row.position_delta for row in rows]
    return {"position_deltas": mx.array(deltas)} if any(deltas) else {}
