"""Model folders for the GPU bench: Llama shapes with random weights, ready for `load_model`.

Random weights cost the same bytes and kernels as trained ones, and no download:
the GPU machine has no network. The tokenizer is the default model's (49,152 tokens).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int = 49152
    bits: int | None = None  # None: bf16
    group_size: int = 64
    embedding_bits: int | None = None  # the default model keeps its embedding at 8 bits
    tied: bool = True  # the output layer is the embedding's (Llama-3.1-8B has its own)

    def config(self) -> dict:
        config = {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "vocab_size": self.vocab,
            "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
            "tie_word_embeddings": self.tied,
            "torch_dtype": "bfloat16",
            "bos_token_id": 1,
            "eos_token_id": 2,
        }
        if self.bits:
            quantization = {"group_size": self.group_size, "bits": self.bits}
            if self.embedding_bits:
                quantization["model.embed_tokens"] = {
                    "group_size": self.group_size,
                    "bits": self.embedding_bits,
                }
            config["quantization"] = quantization
        return config


LLAMA_1B = Shape("llama-1b-bf16", 2048, 8192, 16, 32, 8)
LLAMA_1B_4BIT = Shape("llama-1b-4bit", 2048, 8192, 16, 32, 8, bits=4)
DEFAULT_SHAPE = Shape(
    "smollm2-135m-4bit", 576, 1536, 30, 9, 3, bits=4, group_size=32, embedding_bits=8
)
# Llama-3.1-8B's layers and its own output layer, over the bench tokenizer's 49,152 rows
# rather than 128,256 (every token it samples must decode): 14.8 GB in bf16 where the real
# model has 16.1, 4.2 GB in 4 bits.
LLAMA_8B = Shape("llama-8b-bf16", 4096, 14336, 32, 32, 8, tied=False)
LLAMA_8B_4BIT = Shape("llama-8b-4bit", 4096, 14336, 32, 32, 8, bits=4, tied=False)
TINY = Shape("tiny-bf16", 64, 128, 2, 4, 2)
SHAPES = {
    shape.name: shape
    for shape in (LLAMA_1B, LLAMA_1B_4BIT, DEFAULT_SHAPE, LLAMA_8B, LLAMA_8B_4BIT, TINY)
}


def quantize(model, shape: Shape) -> None:
    """Quantize `model` in place as `shape` says (nothing for a bf16 shape)."""
    import mlx.nn as nn

    if not shape.bits:
        return
    quantization = shape.config()["quantization"]

    def predicate(path, module):
        if not hasattr(module, "to_quantized"):
            return False
        return quantization.get(path, True)

    nn.quantize(model, group_size=shape.group_size, bits=shape.bits, class_predicate=predicate)


def fused_model(shape: Shape):
    """A random-weight model of `shape` in memory (bf16, quantized as the shape says), its
    layers' projections fused as the engine loads them on a GPU."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.models import llama

    from inference.engine.acceleration import fused_projections

    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(shape.config()))
    model.update(tree_map(lambda p: (p * 0.5).astype(mx.bfloat16), model.parameters()))
    quantize(model, shape)
    mx.eval(model.parameters())
    fused_projections.fuse_projections(model)
    return model


def build_folder(shape: Shape, folder: Path, tokenizer_from: Path) -> Path:
    """Write config, random bf16 (or quantized) weights and the tokenizer into `folder`."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.models import llama
    from mlx_lm.utils import save_model

    folder.mkdir(parents=True, exist_ok=True)
    config = shape.config()
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    model.update(tree_map(lambda p: (p * 0.5).astype(mx.bfloat16), model.parameters()))
    quantize(model, shape)
    mx.eval(model.parameters())
    save_model(folder, model, donate_model=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


def weight_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.glob("*.safetensors"))
