"""A tiny random-weight Gemma 3n (model type gemma3n), built from its published config, with
its real processor files (tests/vlm_files/gemma3n), and short synthetic audio clips.

The config keeps Gemma 3n's shape where it matters to the engine: sliding and full
attention layers, the last layers sharing the KV of earlier ones, per-layer embeddings,
AltUp, an activation-sparse first layer, and a conformer audio tower fed the feature
extractor's real 128-bin log-mel frames. Widths and depths are shrunk, but for the vision
tower's: MobileNet v5, its blocks fixed in mlx-vlm's code at 294M parameters, whose weights
mlx-vlm 0.7.10's load needs (its sanitize reads one; the load is strict). They are zeros
(float16, 588 MB): no test sends the tiny model an image.

The tokenizer is the default model's (SmolLM2) with Gemma's special tokens added where
Gemma's vocabulary layout needs them: each tower's hard tokens are the 128 ids from its
vocab offset on (the end-of-image token first, then the image token; likewise for audio).

The builders import MLX: import this module inside fixtures.
"""

from __future__ import annotations

import copy
import io
import json
import shutil
import wave
from pathlib import Path

import numpy as np

from tests.architecture_models import DEFAULT_TOKENIZER_DIR
from tests.vision_models import FILES, _save_random_model, _tokenizer_with

GEMMA3N = "gemma3n"
GEMMA3N_MODEL = "tiny-gemma3n"

# Gemma's chat and tower tokens below the towers' vocabularies, then filler up to the first.
HEAD_TOKENS = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>",
               "<start_of_image>", "<start_of_audio>"]  # fmt: skip
VISION_OFFSET = 49152 + 64  # where the real one is 262144: past the text vocabulary
TOWER_VOCAB = 128
SPECIAL = {
    "audio_token": "<audio_soft_token>",
    "boa_token": "<start_of_audio>",
    "eoa_token": "<end_of_audio>",
    "image_token": "<image_soft_token>",
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
}
CONFIG_IDS = {
    "audio_token_id": "<audio_soft_token>",
    "boa_token_id": "<start_of_audio>",
    "eoa_token_id": "<end_of_audio>",
    "image_token_id": "<image_soft_token>",
    "boi_token_id": "<start_of_image>",
    "eoi_token_id": "<end_of_image>",
}

# Six layers, the last two sharing the KV of the last concrete full and sliding ones; a
# window of 32, so an audio prompt (188 soft tokens) runs past it.
LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention",
               "sliding_attention", "sliding_attention", "full_attention"]  # fmt: skip
TINY_TEXT = {
    "hidden_size": 64,
    "intermediate_size": [128] * 6,
    "num_hidden_layers": 6,
    "layer_types": LAYER_TYPES,
    "num_kv_shared_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "hidden_size_per_layer_input": 16,
    "laurel_rank": 8,
    "sliding_window": 32,
    "activation_sparsity_pattern": [0.95] + [0.0] * 5,
}
TINY_AUDIO = {
    "hidden_size": 32,
    "conf_num_hidden_layers": 1,
    "conf_num_attention_heads": 2,
    "sscp_conv_channel_size": [8, 4],
}


def _gemma_tokens() -> list[str]:
    filler = [f"<unused{i}>" for i in range(VISION_OFFSET - 49152 - len(HEAD_TOKENS))]
    vision = ["<end_of_image>", "<image_soft_token>",
              *(f"<unused_vision{i}>" for i in range(TOWER_VOCAB - 2))]  # fmt: skip
    audio = ["<end_of_audio>", "<audio_soft_token>",
             *(f"<unused_audio{i}>" for i in range(TOWER_VOCAB - 2))]  # fmt: skip
    return [*HEAD_TOKENS, *filler, *vision, *audio]


def _gemma3n_config(ids: dict[str, int]) -> dict:
    config = json.loads((FILES / GEMMA3N / "config.json").read_text())
    audio_offset = VISION_OFFSET + TOWER_VOCAB
    config["text_config"].update(
        copy.deepcopy(TINY_TEXT),
        vocab_size=audio_offset + TOWER_VOCAB,
        vocab_size_per_layer_input=VISION_OFFSET,
    )
    config["audio_config"].update(TINY_AUDIO, vocab_offset=audio_offset)
    config["vision_config"]["vocab_offset"] = VISION_OFFSET
    config.update({key: ids[token] for key, token in CONFIG_IDS.items()})
    config["eos_token_id"] = [ids["<eos>"], ids["<end_of_turn>"]]
    config["torch_dtype"] = "float32"
    return config


def build_gemma3n_folder(folder: Path, seed: int = 0) -> Path:
    """A tiny random-weight Gemma 3n in `folder`, loadable by mlx-vlm with its processor."""
    source = FILES / GEMMA3N
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer_with(folder, _gemma_tokens(), copies=())
    assert ids["<end_of_image>"] == VISION_OFFSET
    assert ids["<audio_soft_token>"] == VISION_OFFSET + TOWER_VOCAB + 1
    config = _gemma3n_config(ids)
    tokenizer_config = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)  # Gemma 3n's is chat_template.jinja
    tokenizer_config.update(
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        extra_special_tokens=SPECIAL,
        processor_class="Gemma3nProcessor",
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    for name in ("preprocessor_config.json", "processor_config.json", "chat_template.jinja"):
        shutil.copy(source / name, folder / name)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _save_random_model(folder, config, seed, modules=("text", "vision", "audio"),
                       blank="vision_tower")  # fmt: skip
    return folder


def wav(seconds: float, *, frequency: float = 440.0, rate: int = 16000, seed: int = 0) -> bytes:
    """A mono 16-bit wav: a sine at `frequency` under a little noise of `seed`."""
    times = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).normal(0, 0.05, times.shape)
    samples = np.clip(0.5 * np.sin(2 * np.pi * frequency * times) + noise, -1, 1)
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes((samples * 32767).astype("<i2").tobytes())
    return out.getvalue()
