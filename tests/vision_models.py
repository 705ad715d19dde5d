"""Tiny random-weight vision-language models, built from real configs, with real processors.

Each model's own files ship under tests/vlm_files/<model_type>/: its published config.json,
its image processor's preprocessor_config.json and its chat template. A builder shrinks the
config's widths and depths, saves random weights as mlx-vlm loads them, and makes the
tokenizer from the default model's (SmolLM2, also ChatML) with the model's special tokens
added, their ids written into the config where the real ones stood. The processor that
prepares the images is then the model's own (mlx-vlm's port of it): the tests run the real
preprocessing, resize and patching included, on a model small enough for the CPU. Where a
processor's image size is its vision tower's (Gemma 3's: one square, a fixed count of soft
tokens), the builder shrinks the two together.

The builders import MLX: import this module inside fixtures (conftest.py puts the
optimized BLAS under MLX first).
"""

from __future__ import annotations

import copy
import io
import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from tests.architecture_models import DEFAULT_TOKENIZER_DIR

FILES = Path(__file__).resolve().parent / "vlm_files"
QWEN2_5_VL = "qwen2_5_vl"
QWEN2_5_VL_MODEL = "tiny-qwen2-5-vl"

# Qwen2-VL's vision tokens, in the order of their ids in Qwen's own vocabulary, and the
# config keys that name them.
QWEN_VISION_TOKENS = {
    "<|vision_start|>": "vision_start_token_id",
    "<|vision_end|>": "vision_end_token_id",
    "<|vision_pad|>": "vision_token_id",
    "<|image_pad|>": "image_token_id",
    "<|video_pad|>": "video_token_id",
}
# SmolLM2's tokens in the roles Qwen's config names: <|endoftext|> and <|im_end|>.
CHATML_IDS = {"bos_token_id": 0, "eos_token_id": 2}

# The shrunk shape: a 64-wide language model of 2 layers (heads of 32, which a quantized
# KV cache's smallest group divides; mRoPE sections summing to half of that), and a
# 32-wide vision tower of 2 blocks, the second global.
TINY_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 4096,
    "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
}
TINY_VISION = {
    "depth": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 64,
    "fullatt_block_indexes": [1],
}

# SmolVLM-256M-Instruct (model type idefics3): its tokenizer is SmolLM2's (the default
# model's) with these added, in this order, which puts each at its real id (<image> 49190,
# <end_of_utterance> 49279); the special-token wiring its tokenizer_config.json adds.
IDEFICS3 = "idefics3"
IDEFICS3_MODEL = "tiny-smolvlm"
SMOLVLM_TOKENS = [
    "<global-img>",
    *(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7)),
    "<fake_token_around_image>",
    "<image>",
    *(f"<|reserved_special_token_{i}|>" for i in range(88)),
    "<end_of_utterance>",
]
SMOLVLM_TOKENIZER = {
    "eos_token": "<end_of_utterance>",
    "additional_special_tokens": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
}
# SmolVLM2 (model type smolvlm; HuggingFaceTB/SmolVLM2-256M-Video-Instruct's files): the
# same tokens at the same ids and the same 512-pixel tiles, Idefics3's model in mlx-vlm,
# its own processor (SmolVLMProcessor, SmolVLMImageProcessor).
SMOLVLM2 = "smolvlm"
SMOLVLM2_MODEL = "tiny-smolvlm2"
# Its shrunk shape: a 64-wide Llama of 2 layers, and a 32-wide SigLIP of 2 layers over the
# real 512-pixel tiles of 16-pixel patches (the processor's tiles are the config's).
TINY_IDEFICS3_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
TINY_IDEFICS3_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}

# Gemma 3 (model type gemma3; google/gemma-3-4b-it's files): its chat and image tokens,
# added to the default model's tokenizer past its vocabulary, and its special-token wiring.
GEMMA3 = "gemma3"
GEMMA3_MODEL = "tiny-gemma3"
GEMMA3_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>",
                 "<start_of_image>", "<end_of_image>", "<image_soft_token>"]  # fmt: skip
GEMMA3_IMAGE_TOKENS = {
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
}
GEMMA3_IDS = {  # config.json's keys, and generation_config.json's
    "boi_token_index": "<start_of_image>",
    "eoi_token_index": "<end_of_image>",
    "image_token_index": "<image_soft_token>",
    "pad_token_id": "<pad>",  # mlx-vlm's default, 0, is Gemma's <pad>: here another token
    "bos_token_id": "<bos>",
}
# Its shrunk shape: six 64-wide layers, five sliding (a window of 16, which an image's
# prompt runs past) and one global, as Gemma 3's pattern has them; a 32-wide SigLIP of 2
# layers over 112-pixel images of 14-pixel patches, pooled to 16 soft tokens (the
# processor's image size and token count follow: preprocessor_config.json's, processor_config's).
GEMMA3_IMAGE_SIZE = 112
GEMMA3_SOFT_TOKENS = 16
TINY_GEMMA3_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "query_pre_attn_scalar": 32,
    "sliding_window": 16,
    "mm_tokens_per_image": GEMMA3_SOFT_TOKENS,  # mlx-vlm's projector reads it here
}
TINY_GEMMA3_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": GEMMA3_IMAGE_SIZE,
}

# Qwen3-VL (model type qwen3_vl; Qwen/Qwen3-VL-4B-Instruct's files): Qwen's vision tokens,
# as Qwen2.5-VL's. Its shrunk shape: a 64-wide language model of 4 layers (heads of 32,
# interleaved mRoPE sections summing to half of that), the first three of which add the
# deepstack features of a 32-wide vision tower of 4 blocks, taken after its last three
# (the real model's: 5, 11 and 17 of 24).
QWEN3_VL = "qwen3_vl"
QWEN3_VL_MODEL = "tiny-qwen3-vl"
TINY_QWEN3_VL_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [6, 5, 5], "rope_type": "default"},
    "dtype": "float32",
}
TINY_QWEN3_VL_VISION = {
    "depth": 4,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "out_hidden_size": 64,
    "deepstack_visual_indexes": [1, 2, 3],
}

WEIGHT_SCALE = 2.0


def _tokenizer_with(
    folder: Path, tokens: list[str], copies=("special_tokens_map.json", "generation_config.json")
) -> dict[str, int]:
    """The default model's tokenizer saved in `folder` with `tokens` added as special
    tokens, and its `copies`; the tokens' ids."""
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(DEFAULT_TOKENIZER_DIR / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in tokens])
    tokenizer.save(str(folder / "tokenizer.json"))
    for name in copies:
        shutil.copy(DEFAULT_TOKENIZER_DIR / name, folder / name)
    return {token: tokenizer.token_to_id(token) for token in tokens}


def _qwen2_5_vl_config(ids: dict[str, int], text: dict, vision: dict) -> dict:
    config = json.loads((FILES / QWEN2_5_VL / "config.json").read_text())
    config.update(copy.deepcopy(text), **CHATML_IDS)
    config["vision_config"].update(vision)
    for token, key in QWEN_VISION_TOKENS.items():
        config[key] = ids[token]
    # The vocabulary holds the added tokens, rounded up as Qwen's own is.
    config["vocab_size"] = (max(ids.values()) // 64 + 1) * 64
    config["torch_dtype"] = "float32"
    return config


def build_qwen2_5_vl_folder(
    folder: Path, seed: int = 0, *, text: dict | None = None, vision: dict | None = None
) -> Path:
    """A tiny random-weight Qwen2.5-VL in `folder`, loadable by mlx-vlm with its processor;
    `text` and `vision` replace the shrunk shape's keys (bench/vision.py's larger one)."""
    source = FILES / QWEN2_5_VL
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer_with(folder, list(QWEN_VISION_TOKENS))
    config = _qwen2_5_vl_config(
        ids, {**TINY_TEXT, **(text or {})}, {**TINY_VISION, **(vision or {})}
    )
    template = json.loads((source / "chat_template.json").read_text())["chat_template"]
    tokenizer_config = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer_config.json").read_text())
    # Qwen's repos carry the template in tokenizer_config.json too, and pad with <|endoftext|>.
    tokenizer_config.update(chat_template=template, pad_token="<|endoftext|>")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    for name in ("preprocessor_config.json", "chat_template.json"):
        shutil.copy(source / name, folder / name)
    (folder / "config.json").write_text(json.dumps(config, indent=2))

    _save_random_model(folder, config, seed)
    return folder


def _save_random_model(
    folder: Path,
    config: dict,
    seed: int,
    modules=("text", "vision"),
    blank: str | None = None,
    drawn: tuple[str, ...] = (),
) -> None:
    """Random weights for `config`, saved as mlx-vlm loads them; zeros in float16 for a
    `blank` module that no test runs (a tower whose size mlx-vlm's code fixes); `drawn`
    matrices, which their module makes constant, drawn at random as the others are."""
    from mlx_vlm.utils import get_model_and_args, update_module_configs

    # The model as mlx-vlm's load_model builds it: ModelConfig.from_dict fills in
    # text_config from the top level where it has none, which update_module_configs types.
    params = {"text_config": {}, **copy.deepcopy(config)}
    module, _ = get_model_and_args(params)
    model_config = module.ModelConfig.from_dict(params)
    model_config = update_module_configs(model_config, module, params, list(modules))
    mx.random.seed(seed)
    model = module.Model(model_config)
    # Matrices at twice their initial scale: at it, a greedy run repeats one token, which
    # would say nothing of the positions each step runs at.
    weights = {
        name: value * WEIGHT_SCALE if value.ndim >= 2 and "embed_tokens" not in name else value
        for name, value in tree_flatten(model.parameters())
    }
    for name in drawn:  # a constant projection would map every image to one vector
        rows = weights[name].shape[0]
        weights[name] = mx.random.normal(weights[name].shape) * WEIGHT_SCALE / rows**0.5
    if blank is not None:
        weights.update({name: mx.zeros(value.shape, mx.float16) for name, value in weights.items()
                        if name.startswith(f"{blank}.")})  # fmt: skip
    mx.eval(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})


def build_idefics3_folder(folder: Path, seed: int = 0, family: str = IDEFICS3) -> Path:
    """A tiny random-weight SmolVLM (Idefics3: plain RoPE, image features spliced into the
    embeddings), loadable by mlx-vlm with its processor: 512-pixel tiles of 64 features.
    `family` SMOLVLM2 gives a SmolVLM2: the same model, SmolVLM2's files and processor."""
    source = FILES / family
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer_with(folder, SMOLVLM_TOKENS, copies=())
    assert ids["<image>"] == 49190 and ids["<end_of_utterance>"] == 49279  # the real ids
    config = json.loads((source / "config.json").read_text())
    config["text_config"].update(TINY_IDEFICS3_TEXT)
    config["vision_config"].update(TINY_IDEFICS3_VISION)
    config["torch_dtype"] = "float32"
    tokenizer_config = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)  # SmolVLM's is chat_template.json's
    processor = json.loads((source / "processor_config.json").read_text())["processor_class"]
    tokenizer_config.update(SMOLVLM_TOKENIZER, processor_class=processor)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    for name in ("preprocessor_config.json", "processor_config.json", "chat_template.json",
                 "generation_config.json"):  # fmt: skip
        shutil.copy(source / name, folder / name)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _save_random_model(folder, config, seed)
    return folder


def build_qwen3_vl_folder(folder: Path, seed: int = 3) -> Path:
    """A tiny random-weight Qwen3-VL (mRoPE, and deepstack features added to its first
    layers' hidden states at the image's positions), loadable by mlx-vlm with its processor.
    The seed's weights answer each test picture with tokens of their own: most seeds' (0 to
    2) repeat one token whatever the picture, which would tell two images apart by logits
    alone and say little of the positions a greedy run steps through."""
    source = FILES / QWEN3_VL
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer_with(folder, list(QWEN_VISION_TOKENS))
    config = json.loads((source / "config.json").read_text())
    vocab_size = (max(ids.values()) // 64 + 1) * 64  # rounded up as Qwen's own is
    config["text_config"].update(TINY_QWEN3_VL_TEXT, vocab_size=vocab_size, **CHATML_IDS)
    config["vision_config"].update(TINY_QWEN3_VL_VISION)
    config.update({key: ids[token] for token, key in QWEN_VISION_TOKENS.items() if key in config})
    config["torch_dtype"] = "float32"
    template = (source / "chat_template.jinja").read_text()
    tokenizer_config = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer_config.json").read_text())
    tokenizer_config.update(chat_template=template, pad_token="<|endoftext|>")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    for name in ("preprocessor_config.json", "chat_template.jinja"):
        shutil.copy(source / name, folder / name)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _save_random_model(folder, config, seed)
    return folder


def _adds_bos(path: Path, bos: int) -> None:
    """The tokenizer at `path` made to put <bos> before a text it encodes with its special
    tokens, as Gemma's own does (its chat template renders one too)."""
    from tokenizers import Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(path))
    template = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos)]
    )
    tokenizer.post_processor = processors.Sequence([tokenizer.post_processor, template])
    tokenizer.save(str(path))


def _gemma3_config(ids: dict[str, int]) -> dict:
    config = json.loads((FILES / GEMMA3 / "config.json").read_text())
    config["text_config"].update(TINY_GEMMA3_TEXT, vocab_size=(max(ids.values()) // 64 + 1) * 64)
    config["vision_config"].update(TINY_GEMMA3_VISION)
    config.update({key: ids[token] for key, token in GEMMA3_IDS.items() if key != "bos_token_id"})
    config["mm_tokens_per_image"] = GEMMA3_SOFT_TOKENS
    config["eos_token_id"] = [ids["<eos>"], ids["<end_of_turn>"]]
    config["torch_dtype"] = "float32"
    return config


def build_gemma3_folder(folder: Path, seed: int = 0) -> Path:
    """A tiny random-weight Gemma 3 (its image's soft tokens in the embeddings, sliding and
    global layers), loadable by mlx-vlm with its processor (pan and scan off, as shipped)."""
    source = FILES / GEMMA3
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids = _tokenizer_with(folder, GEMMA3_TOKENS, copies=())
    _adds_bos(folder / "tokenizer.json", ids["<bos>"])
    tokenizer_config = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)  # Gemma 3's is chat_template.json's
    tokenizer_config.update(
        bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>",
        extra_special_tokens=GEMMA3_IMAGE_TOKENS, processor_class="Gemma3Processor",
    )  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    preprocessor = json.loads((source / "preprocessor_config.json").read_text())
    preprocessor.update(image_seq_length=GEMMA3_SOFT_TOKENS,
                        size={"height": GEMMA3_IMAGE_SIZE, "width": GEMMA3_IMAGE_SIZE})  # fmt: skip
    processor = json.loads((source / "processor_config.json").read_text())
    processor["image_seq_length"] = GEMMA3_SOFT_TOKENS
    generation = json.loads((source / "generation_config.json").read_text())
    generation.update(bos_token_id=ids["<bos>"], pad_token_id=ids["<pad>"],
                      eos_token_id=[ids["<eos>"], ids["<end_of_turn>"]])  # fmt: skip
    config = _gemma3_config(ids)
    files = {"preprocessor_config.json": preprocessor, "processor_config.json": processor,
             "generation_config.json": generation, "config.json": config}  # fmt: skip
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content, indent=2))
    shutil.copy(source / "chat_template.json", folder / "chat_template.json")
    # mlx-vlm makes the projection into the text's width ones, which, after SigLIP's final
    # layer norm (features of zero mean), gives every soft token nearly zero.
    _save_random_model(
        folder, config, seed, drawn=("multi_modal_projector.mm_input_projection_weight",)
    )
    return folder


def png(width: int, height: int, seed: int) -> bytes:
    """A PNG of random colours: images that differ, for a model to tell apart."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()
