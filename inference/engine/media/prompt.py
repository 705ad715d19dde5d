"""A chat prompt's media made model inputs, on the worker's main thread (off the engine's).

The template renders a placeholder where each image stood (Qwen's
`<|vision_start|><|image_pad|><|vision_end|>`); the model's processor, through mlx-vlm's
`prepare_inputs` as its own `generate` calls it, resizes and patches the images and
repeats each placeholder once per embedding the vision tower will give it (Gemma 3's
`<start_of_image>` becomes its soft tokens between their own start and end). The prompt's
ids are then the template's own, as a text prompt's are (no special tokens added). What the
engine needs later (the pixels, the grids) travels as numpy arrays: the engine thread
makes its own MLX arrays of them (one thread owns MLX; mlx-vlm's processors hand back MLX
arrays, but as plain data, no computation, read back here at once). Audio goes the same
way: decoded to the feature extractor's rate (media/audio.py), its `<audio_soft_token>`
placeholder (Gemma 3n's) repeated by the processor, its log-mel frames the arrays.

Every placeholder token of an image (or a clip) is the same id, whatever the image: the
prompt cache would take two pictures for one. So the prompt has a second spelling for the cache,
`key_tokens`, where each image's placeholders are ids drawn from its sha256, above any
vocabulary: a prefix then matches only through the same images. Where an image's
placeholders come in several runs (SmolVLM's, a run a tile), the runs are keyed by all the
prompt's images together.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field

import numpy as np

from ...protocol.media import AUDIO, IMAGE, VISION
from .audio import AudioUndecodable, decode_audio, sampling_rate

# Keyed placeholder ids: 2**32 and up, clear of every vocabulary; 32 bits of the hash
# a position, so an image's first eight positions spell its whole digest.
KEY_BASE = 1 << 32
KEY_WORDS = 8


class MediaRefused(ValueError):
    """The media cannot be made inputs for this model: a client error."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class MediaPrompt:
    """A prompt's media, prepared: the processor's arrays besides the token ids (pixel
    values, image grids...), each image's sha256 in prompt order, the prompt's cache key."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    hashes: tuple[str, ...] = ()
    key_tokens: tuple[int, ...] = ()


def template_messages(messages: list[dict]) -> list[dict]:
    """The messages as a chat template takes them: a media part as its bare type (templates
    test `content['type'] == 'image'`), without its bytes."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [part if part["type"] == "text" else {"type": part["type"]}
                       for part in content]  # fmt: skip
            message = {**message, "content": content}
        out.append(message)
    return out


# A chat template that reads a message's content only as a list of parts (SmolVLM's: it
# loops over the content, and a string's characters have no type) renders a plain string
# as nothing; such a template gets each string as one text part instead.
PROBE = "mlxlab-probe"


def reads_string_content(render) -> bool:
    """Whether the template that `render(messages)` runs shows a plain string's content; a
    template that refuses the probe is taken to (the ordinary case)."""
    try:
        return PROBE in render([{"role": "user", "content": PROBE}])
    except Exception:  # jinja raises whatever the template author chose
        return True


def text_parts(messages: list[dict]) -> list[dict]:
    """The messages with each string content made a list of one text part."""
    return [
        {**message, "content": [{"type": "text", "text": message["content"]}]}
        if isinstance(message.get("content"), str)
        else message
        for message in messages
    ]


def prompt_media(messages: list[dict]) -> list[dict]:
    """The messages' media parts, in order."""
    return [
        part
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part["type"] != "text"
    ]


def _check_taken(takes: tuple[str, ...], name: str, parts: list[dict]) -> None:
    """The web side refuses media a model does not take; a worker asked anyway (a client
    of its socket) says so too."""
    for kind, capability in ((IMAGE, VISION), (AUDIO, AUDIO)):
        if any(part["type"] == kind for part in parts) and capability not in takes:
            raise MediaRefused(
                f"model '{name}' does not accept {kind} input", code="model_not_supported"
            )


def _decoded(processor, parts: list[dict]) -> tuple[list, list]:
    """The images (PIL) and the clips (samples at the feature extractor's rate) of `parts`."""
    from mlx_vlm.utils import load_image

    try:
        images = [load_image(io.BytesIO(part["data"])) for part in parts if part["type"] == IMAGE]
    except ValueError as error:
        raise MediaRefused(f"an image cannot be decoded: {error}") from None
    clips = [part["data"] for part in parts if part["type"] == AUDIO]
    try:
        clips = [decode_audio(data, rate=sampling_rate(processor)) for data in clips]
    except AudioUndecodable as error:
        raise MediaRefused(str(error)) from None
    return images, clips


def prepare_media(loaded, name: str, text: str, parts: list[dict]) -> tuple[list[int], MediaPrompt]:
    """The prompt's token ids (placeholders expanded) and its media as model inputs.

    `loaded` is the worker's model (acceleration/loader.py LoadedModel), `text` the rendered
    prompt; a model that does not take the media is MediaRefused."""
    from mlx_vlm.utils import prepare_inputs

    _check_taken(loaded.media, name, parts)
    processor, config = loaded.processor, loaded.model.config
    images, clips = _decoded(processor, parts)
    inputs = prepare_inputs(
        processor,
        images=images or None,  # an empty list is a batch of none, against one prompt
        audio=clips or None,
        prompts=[text],
        add_special_tokens=False,  # the template rendered them, as for a text prompt
    )
    tokens = np.asarray(inputs["input_ids"]).reshape(-1).tolist()
    arrays = {
        name: np.asarray(value)
        for name, value in inputs.items()
        if name not in ("input_ids", "attention_mask") and value is not None
    }
    tokens, arrays = _one_bos(tokens, arrays, getattr(processor, "tokenizer", processor))
    hashes = tuple(part["sha256"] for part in parts)
    spans = _placeholder_spans(tokens, config)
    return tokens, MediaPrompt(arrays, hashes, key_tokens(tokens, spans, hashes))


def _one_bos(tokens: list[int], arrays: dict, tokenizer) -> tuple[list[int], dict]:
    """The prompt with the template's <bos> alone, as a text prompt has it. A processor whose
    call names no `add_special_tokens` (Gemma 3's, Gemma 3n's) is not passed it by mlx-vlm
    0.7.10's prepare_inputs, and its tokenizer (a real Gemma one) adds its own <bos> before
    the template's: one is dropped, with its column of any array aligned with the tokens."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None or tokens[:2] != [bos, bos]:
        return tokens, arrays
    aligned = {name for name, value in arrays.items() if value.shape == (1, len(tokens))}
    return tokens[1:], {
        name: value[:, 1:] if name in aligned else value for name, value in arrays.items()
    }


def _placeholder_spans(tokens: list[int], config) -> tuple:
    """The runs of image and audio placeholders, in prompt order (mlx-vlm's spans know the
    image and video tokens; Gemma 3n's audio token is added)."""
    from mlx_vlm.apc import media_token_spans, multimodal_token_ids_from_config

    ids = multimodal_token_ids_from_config(config)
    if getattr(config, "audio_token_id", None) is not None:
        ids.add(int(config.audio_token_id))
    return media_token_spans(tokens, ids)


def key_tokens(tokens: list[int], spans, hashes: tuple[str, ...]) -> tuple[int, ...]:
    """`tokens` with each placeholder span's ids drawn from its image's hash (from all the
    images' together where the spans do not pair off with them one to one)."""
    if len(spans) != len(hashes):
        hashes = (hashlib.sha256("".join(hashes).encode()).hexdigest(),) * len(spans)
    keyed = list(tokens)
    for (start, end), digest in zip(spans, hashes, strict=True):
        value = int(digest, 16)
        for index in range(start, end):
            word = (value >> (32 * ((index - start) % KEY_WORDS))) & 0xFFFFFFFF
            keyed[index] = KEY_BASE + word
    return tuple(keyed)
