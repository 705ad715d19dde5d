"""Convert a llama-architecture GGUF file into a folder that ``mlx_lm.load`` understands.

MLX reads GGUF natively and keeps Q4_0, Q4_1 and Q8_0 tensors packed as affine-quantized
weights, so the conversion is mostly renaming: tensors get mlx-lm names, the metadata
becomes ``config.json`` and the embedded vocabulary becomes a Hugging Face tokenizer.

The file header (each tensor's exact GGUF type) is read by header.py.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from .header import GGUFImportError, Header, TensorInfo, read_header
from .tokenizer import TokenizerImportError, build_tokenizer, write_json

# Types MLX loads losslessly: name -> (elements per block, bytes per block).
_BLOCK_LAYOUT = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20),
    "Q8_0": (32, 34),
}  # fmt: skip
_QUANT_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}
_QUANT_GROUP_SIZE = 32
_FLOAT_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

_LLAMA_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
_LLAMA_GLOBAL |= {"output": "lm_head"}
_LLAMA_BLOCK = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}  # fmt: skip
_TENSOR_NAME = re.compile(r"(?:blk\.(?P<layer>\d+)\.)?(?P<part>\w+)\.weight")


@dataclass(frozen=True)
class ImportedModel:
    """Summary of a successful import.

    Attributes:
        path: The final model folder.
        architecture: GGUF architecture, e.g. ``"llama"``.
        quantization: Human-readable weight format, e.g. ``"Q4_1 (4-bit, group 32)"``.
        context_length: Maximum context length declared by the file.
        size_bytes: Size on disk of the model folder.
    """

    path: Path
    architecture: str
    quantization: str
    context_length: int
    size_bytes: int


Progress = Callable[[float, str], None]  # (fraction done, what is happening)


def _no_progress(fraction: float, message: str) -> None:
    pass


def import_gguf(gguf_path: Path, dest_dir: Path, progress: Progress | None = None) -> ImportedModel:
    """Convert GGUF at gguf_path into an MLX model folder at dest_dir (must not exist yet).

    The folder is assembled in a hidden sibling directory and moved into place at the end,
    so ``dest_dir`` either appears complete or not at all.

    Args:
        gguf_path: Path of the ``.gguf`` file.
        dest_dir: Folder to create; its parent is created if missing.
        progress: Called at each stage with the fraction done and a short message.

    Returns:
        A summary of the imported model.

    Raises:
        GGUFImportError: If ``dest_dir`` exists, the file is missing or not a valid GGUF,
            or it uses an unsupported architecture, tensor type or tokenizer.
    """
    gguf_path, dest_dir = Path(gguf_path), Path(dest_dir)
    progress = progress or _no_progress
    if dest_dir.exists():
        raise GGUFImportError(f"destination already exists: {dest_dir}")
    progress(0.0, "reading the GGUF header")
    header = read_header(gguf_path)
    architecture = header.metadata.get("general.architecture")
    if architecture != "llama":
        raise GGUFImportError(f"unsupported architecture {architecture!r} (only 'llama')")
    tensor_types = _check_tensors(header, gguf_path.stat().st_size)
    config = _llama_config(header.metadata, tensor_types, _vocab_rows(header))
    progress(0.1, "building the tokenizer")
    try:
        tokenizer = build_tokenizer(header.metadata, config["max_position_embeddings"])
    except TokenizerImportError as exc:
        raise GGUFImportError(str(exc)) from exc
    if eos := tokenizer.eos_token_ids:
        config["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    if tokenizer.bos_token_id is not None:
        config["bos_token_id"] = tokenizer.bos_token_id
    progress(0.3, f"reading {len(header.tensors)} tensors")
    weights = _load_weights(gguf_path, header)

    dest_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{dest_dir.name}.partial-", dir=dest_dir.parent))
    progress(0.6, "writing the MLX model folder")
    try:
        mx.save_safetensors(str(partial / "model.safetensors"), weights, {"format": "mlx"})
        write_json(partial / "config.json", config)
        generation = {"eos_token_id": config.get("eos_token_id")}
        if "bos_token_id" in config:
            generation["bos_token_id"] = config["bos_token_id"]
        write_json(partial / "generation_config.json", generation)
        tokenizer.save(partial)
        partial.chmod(0o755)  # mkdtemp creates it private; the model folder need not be
        if dest_dir.exists():  # os.replace would silently swap in over an empty directory
            raise GGUFImportError(f"destination already exists: {dest_dir}")
        os.replace(partial, dest_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    progress(1.0, "imported")
    return ImportedModel(
        path=dest_dir,
        architecture=architecture,
        quantization=_describe_quantization(tensor_types),
        context_length=config["max_position_embeddings"],
        size_bytes=sum(f.stat().st_size for f in dest_dir.iterdir() if f.is_file()),
    )


def _check_tensors(header: Header, file_size: int) -> dict[str, str]:
    """Validate tensor names, types and extents; map mlx-lm module name -> GGUF type."""
    layers = header.metadata.get("llama.block_count")
    if not isinstance(layers, int):
        raise GGUFImportError("missing metadata llama.block_count")
    required = ["token_embd.weight", "output_norm.weight"]
    required += [f"blk.{i}.{part}.weight" for i in range(layers) for part in _LLAMA_BLOCK]
    present = {tensor.name for tensor in header.tensors}
    if unexpected := sorted(present - set(required) - {"output.weight"}):
        raise GGUFImportError(f"unsupported tensor {unexpected[0]!r} for architecture 'llama'")
    if missing := [name for name in required if name not in present]:
        raise GGUFImportError(f"missing tensor {missing[0]} ({len(missing)} missing in total)")
    types = {}
    for tensor in header.tensors:
        if tensor.type_name not in _BLOCK_LAYOUT:
            raise GGUFImportError(f"unsupported tensor type {tensor.type_name} in {tensor.name}")
        block, block_bytes = _BLOCK_LAYOUT[tensor.type_name]
        count = math.prod(tensor.shape)
        end = header.data_offset + tensor.offset + count // block * block_bytes
        if count % block or end > file_size:
            raise GGUFImportError(f"tensor {tensor.name} is truncated or misshapen")
        if len(tensor.shape) == 2:  # only matrices belong to quantizable layers
            types[_mlx_name(tensor.name)] = tensor.type_name
    return types


def _mlx_name(gguf_name: str) -> str:
    """Translate a GGUF ``<tensor>.weight`` name into its mlx-lm module path."""
    match = _TENSOR_NAME.fullmatch(gguf_name)
    if match is not None:
        layer, part = match["layer"], match["part"]
        if layer is None and part in _LLAMA_GLOBAL:
            return _LLAMA_GLOBAL[part]
        if layer is not None and part in _LLAMA_BLOCK:
            return f"model.layers.{layer}.{_LLAMA_BLOCK[part]}"
    raise GGUFImportError(f"unsupported tensor {gguf_name!r} for architecture 'llama'")


# --- config and weights ------------------------------------------------------------------


def _vocab_rows(header: Header) -> int:
    """Rows of the embedding matrix: the vocab size the weights actually have."""
    embedding = next(t for t in header.tensors if t.name == "token_embd.weight")
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    # A padded embedding is fine; a token list longer than it would index past the end.
    if not isinstance(tokens, list) or not 0 < len(tokens) <= embedding.shape[-1]:
        raise GGUFImportError("tokenizer.ggml.tokens is missing or larger than the embedding")
    return embedding.shape[-1]


def _llama_config(
    meta: dict[str, Any], tensor_types: dict[str, str], vocab_size: int
) -> dict[str, Any]:
    """Build the mlx-lm llama config from ``llama.*`` metadata."""

    def need(key: str) -> Any:
        if (value := meta.get(f"llama.{key}")) is None:
            raise GGUFImportError(f"missing metadata llama.{key}")
        return value

    if meta.get("llama.expert_count"):
        raise GGUFImportError("unsupported llama variant: mixture of experts")
    hidden, heads = int(need("embedding_length")), int(need("attention.head_count"))
    head_dim = int(meta.get("llama.attention.key_length", hidden // heads))
    if int(meta.get("llama.rope.dimension_count", head_dim)) != head_dim:
        raise GGUFImportError("unsupported llama variant: partial rotary embedding")
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get("llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(need("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(meta.get("llama.rope.freq_base", 10000.0)),
        # llama.cpp permutes Q/K rows into interleaved RoPE order; keep them and say so.
        "rope_traditional": True,
        "max_position_embeddings": int(need("context_length")),
        "vocab_size": vocab_size,
        "tie_word_embeddings": "lm_head" not in tensor_types,
        "attention_bias": False,
        "mlp_bias": False,
    }
    scaling = meta.get("llama.rope.scaling.type", "none")
    if scaling == "linear":
        factor = float(meta.get("llama.rope.scaling.factor", 1.0))
        config["rope_scaling"] = {"type": "linear", "factor": factor}
    elif scaling != "none":
        raise GGUFImportError(f"unsupported rope scaling {scaling!r}")
    if quantization := _quantization_config(tensor_types):
        config["quantization"] = quantization
    return config


def _quantization_config(tensor_types: dict[str, str]) -> dict[str, Any] | None:
    """Express the file's quantization the way mlx-lm's ``load_model`` reads it.

    The most common quantized type becomes the default; modules of another type get a
    per-module entry, and unquantized matrices are pinned to ``False``.
    """
    primary = _primary_quant_type(tensor_types)
    if primary is None:
        return None
    config: dict[str, Any] = {"group_size": _QUANT_GROUP_SIZE, "bits": _QUANT_BITS[primary]}
    for module, type_name in sorted(tensor_types.items()):
        if type_name not in _QUANT_BITS:
            config[module] = False
        elif _QUANT_BITS[type_name] != config["bits"]:
            config[module] = {"group_size": _QUANT_GROUP_SIZE, "bits": _QUANT_BITS[type_name]}
    return config


def _primary_quant_type(tensor_types: dict[str, str]) -> str | None:
    counts = Counter(t for t in tensor_types.values() if t in _QUANT_BITS)
    return counts.most_common(1)[0][0] if counts else None


def _describe_quantization(tensor_types: dict[str, str]) -> str:
    """Summarise weight formats for people, e.g. ``"Q4_1 (4-bit, group 32) + Q8_0"``."""
    primary = _primary_quant_type(tensor_types)
    if primary is None:
        counts = Counter(tensor_types.values())
        return _FLOAT_NAMES[counts.most_common(1)[0][0]]
    text = f"{primary} ({_QUANT_BITS[primary]}-bit, group {_QUANT_GROUP_SIZE})"
    others = sorted(set(tensor_types.values()) - {primary})
    return " + ".join([text, *others])


def _load_weights(gguf_path: Path, header: Header) -> dict[str, mx.array]:
    """Load all tensors with MLX and rename them, keeping quantized triplets together."""
    try:
        loaded = mx.load(str(gguf_path))
        # MLX narrows BF16 to float16, which overflows above 65504; read those bits ourselves.
        for tensor in header.tensors:
            if tensor.type_name == "BF16":
                loaded[tensor.name] = _read_bf16(gguf_path, header.data_offset, tensor)
    except (RuntimeError, ValueError, OSError) as exc:
        raise GGUFImportError(f"MLX could not read tensors from {gguf_path}: {exc}") from exc
    weights = {}
    for name, array in loaded.items():
        base, _, suffix = name.rpartition(".")
        # MLX stores a quantized "<base>.weight" with "<base>.scales" and "<base>.biases".
        weights[f"{_mlx_name(base + '.weight')}.{suffix}"] = array
    return weights


def _read_bf16(gguf_path: Path, data_offset: int, tensor: TensorInfo) -> mx.array:
    count = math.prod(tensor.shape)
    with gguf_path.open("rb") as file:
        file.seek(data_offset + tensor.offset)
        raw = file.read(count * 2)
    bits = mx.array(memoryview(raw).cast("H"))  # GGUF and every MLX host are little-endian
    return bits.view(mx.bfloat16).reshape(tuple(reversed(tensor.shape)))
