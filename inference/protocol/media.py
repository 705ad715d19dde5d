"""Media in a chat turn, as the web side hands it to a worker, and which models take it.

A message whose content holds media keeps it as a list of parts in the order the client
sent them: text parts `{"type": "text", "text": ...}` and image parts `{"type": "image",
"mime": ..., "sha256": ..., "data": <the file's bytes>}` (msgpack carries bytes as they
are). The hash names the image wherever its identity matters: the prompt cache, a
checkpoint, the routing of a conversation to the replica that holds its prefix.

Which models take images and audio is read from a folder's config.json alone, as the
rest of the registry's facts are: a model type mlx-vlm implements, with a vision (or
audio) tower in its config. mlx-lm also loads some such folders, silently as text only;
the config, not the library that happens to load it, decides. Of mlx-vlm's families, those
the engine serves are listed (SERVED_FAMILIES), with the media it serves of each: each passes
its own inputs to its language model (Qwen2.5-VL its mRoPE positions; Idefics3, SmolVLM's,
none past the embeddings, nor SmolVLM2's (smolvlm: Idefics3's model behind its own
processor); Gemma 3 none either, through its sliding-window layers' own caches, with
causal masks over its images as mlx-vlm's generate runs them; Qwen3-VL its mRoPE positions
and deepstack features; Gemma 3n its audio tower's features and per-layer embeddings), and
a family joins once the engine passes them and a test checks its tokens against mlx-vlm's.
Until then such a folder is what it was: text, where mlx-lm loads it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

TEXT = "text"
IMAGE = "image"  # a part
AUDIO = "audio"  # a part, and the capability of taking it
VISION = "vision"  # the capability of taking images

# The config keys of a model's vision and audio towers, as mlx-vlm's models name them.
VISION_CONFIG_KEYS = ("vision_config",)
AUDIO_CONFIG_KEYS = ("audio_config",)
# mlx-vlm's model types the engine serves, and which of their media (engine/media/).
# SmolVLM2 (smolvlm) runs Idefics3's model behind its own processor (SmolVLMProcessor):
# its images only. Its video input (sampled frames as images, their timestamps in the
# prompt) is not in scope: a video part is a 400 (chat/messages.py). Gemma 3n's images are not
# checked (its vision tower is too big for a test), nor Qwen3-VL's MoE sibling
# (qwen3_vl_moe: the same inputs, another language model).
SERVED_FAMILIES = {
    "qwen2_5_vl": (VISION,),
    "idefics3": (VISION,),
    "smolvlm": (VISION,),
    "gemma3": (VISION,),
    "gemma3n": (AUDIO,),
    "qwen3_vl": (VISION,),
}


def image_part(data: bytes, *, mime: str, sha256: str) -> dict:
    return {"type": IMAGE, "mime": mime, "sha256": sha256, "data": data}


def audio_part(data: bytes, *, audio_format: str, sha256: str) -> dict:
    return {"type": AUDIO, "format": audio_format, "sha256": sha256, "data": data}


def media_parts(messages: list[dict]) -> Iterator[dict]:
    """Every media part of the messages, in order."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            yield from (part for part in content if part.get("type") != TEXT)


def has_media(messages: list[dict]) -> bool:
    return next(media_parts(messages), None) is not None


@functools.cache
def vision_model_types() -> frozenset[str]:
    """The model types mlx-vlm implements, found without importing it (that loads MLX)."""
    spec = importlib.util.find_spec("mlx_vlm")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    models = Path(next(iter(spec.submodule_search_locations))) / "models"
    return frozenset(p.name for p in models.iterdir() if (p / "__init__.py").is_file())


def mlx_vlm_media(config: dict) -> tuple[str, ...]:
    """What media mlx-vlm takes with a model of this config: VISION, AUDIO, both or none."""
    model_type = str(config.get("model_type", "")).replace("-", "_")
    if model_type not in vision_model_types():
        return ()
    towers = ((VISION, VISION_CONFIG_KEYS), (AUDIO, AUDIO_CONFIG_KEYS))
    return tuple(kind for kind, keys in towers if any(config.get(key) for key in keys))


def config_media(config: dict) -> tuple[str, ...]:
    """What media the engine takes with a model of this config (through mlx-vlm)."""
    served = SERVED_FAMILIES.get(str(config.get("model_type", "")).replace("-", "_"), ())
    return tuple(kind for kind in mlx_vlm_media(config) if kind in served)


def folder_media(folder: str | Path) -> tuple[str, ...]:
    """config_media of a model folder; none for a folder without a readable config."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return ()
    return config_media(config) if isinstance(config, dict) else ()
