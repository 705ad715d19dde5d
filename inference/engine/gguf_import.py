"""Convert a llama-architecture GGUF file into a folder that ``mlx_lm.load`` understands.

MLX reads GGUF natively and keeps Q4_0, Q4_1 and Q8_0 tensors packed as affine-quantized
weights, so the conversion is mostly renaming: tensors get mlx-lm names, the metadata
becomes ``config.json`` and the embedded vocabulary becomes a Hugging Face tokenizer.

The file header is parsed here as well because ``mx.load`` hides each tensor's GGUF type
(it silently dequantizes some K-quants), and the type decides what we can import faithfully.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import shutil
import struct
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from .gguf_tokenizer import TokenizerImportError, build_tokenizer, write_json

_MAGIC = b"GGUF"
_SUPPORTED_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32

# ggml tensor type ids -> names, so unsupported types can be named in errors.
_GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip
# Types MLX loads losslessly: name -> (elements per block, bytes per block).
_BLOCK_LAYOUT = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20),
    "Q8_0": (32, 34),
}  # fmt: skip
_QUANT_BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}
_QUANT_GROUP_SIZE = 32
_FLOAT_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

# GGUF metadata value types -> struct format (strings and arrays are handled apart).
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q"}
_SCALAR_FORMATS |= {11: "q", 12: "d"}
_VALUE_FLOAT32, _VALUE_STRING, _VALUE_ARRAY = 6, 8, 9

_LLAMA_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
_LLAMA_GLOBAL |= {"output": "lm_head"}
_LLAMA_BLOCK = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}  # fmt: skip
_TENSOR_NAME = re.compile(r"(?:blk\.(?P<layer>\d+)\.)?(?P<part>\w+)\.weight")


class GGUFImportError(ValueError):
    """The GGUF file cannot be imported; the message names the problem."""


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


@dataclass(frozen=True)
class _TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: innermost dimension first
    type_name: str
    offset: int


@dataclass(frozen=True)
class _Header:
    metadata: dict[str, Any]
    tensors: list[_TensorInfo]
    data_offset: int


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
    header = _read_header(gguf_path)
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


# --- GGUF header -------------------------------------------------------------------------


class _Reader:
    """Sequential little-endian reader over the memory-mapped file."""

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.pos = buffer, 0

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.buffer, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def string(self) -> str:
        (length,) = self.unpack("Q")
        if self.pos + length > len(self.buffer):
            raise struct.error("string runs past end of file")
        raw = self.buffer[self.pos : self.pos + length]
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def value(self, value_type: int) -> Any:
        if value_type == _VALUE_STRING:
            return self.string()
        if value_type == _VALUE_ARRAY:
            item_type, count = self.unpack("IQ")
            if item_type in _SCALAR_FORMATS:  # one unpack call, not one per element
                return list(self.unpack(f"{count}{_SCALAR_FORMATS[item_type]}"))
            return [self.value(item_type) for _ in range(count)]
        if value_type not in _SCALAR_FORMATS:
            raise struct.error(f"unknown metadata value type {value_type}")
        value = self.unpack(_SCALAR_FORMATS[value_type])[0]
        return _short_float32(value) if value_type == _VALUE_FLOAT32 else value


def _read_header(path: Path) -> _Header:
    """Parse metadata and tensor descriptors, turning every low-level failure into ours."""
    try:
        with path.open("rb") as file:
            if file.read(4) != _MAGIC:
                raise GGUFImportError(f"not a GGUF file (bad magic): {path}")
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
                return _parse_header(_Reader(buffer))
    except GGUFImportError:
        raise
    except FileNotFoundError as exc:
        raise GGUFImportError(f"GGUF file not found: {path}") from exc
    except (OSError, ValueError, struct.error, OverflowError, MemoryError) as exc:
        raise GGUFImportError(f"unreadable or truncated GGUF file {path}: {exc}") from exc


def _short_float32(value: float) -> float:
    """Shortest decimal equal to a float32, so 1e-5 is not written as 9.9999997e-06."""
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == struct.pack("<f", value):
            return candidate
    return value


def _parse_header(reader: _Reader) -> _Header:
    reader.pos = 4
    (version,) = reader.unpack("I")
    if version not in _SUPPORTED_VERSIONS:
        raise GGUFImportError(f"unsupported GGUF version {version}")
    tensor_count, kv_count = reader.unpack("QQ")
    metadata = {}
    for _ in range(kv_count):
        key = reader.string()
        (value_type,) = reader.unpack("I")
        metadata[key] = reader.value(value_type)
    tensors = []
    for _ in range(tensor_count):
        name = reader.string()
        (n_dims,) = reader.unpack("I")
        shape = reader.unpack(f"{n_dims}Q")
        type_id, offset = reader.unpack("IQ")
        type_name = _GGML_TYPE_NAMES.get(type_id, f"type {type_id}")
        tensors.append(_TensorInfo(name, shape, type_name, offset))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT)) or 1
    data_offset = -(-reader.pos // alignment) * alignment
    return _Header(metadata, tensors, data_offset)


def _check_tensors(header: _Header, file_size: int) -> dict[str, str]:
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


def _vocab_rows(header: _Header) -> int:
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


def _load_weights(gguf_path: Path, header: _Header) -> dict[str, mx.array]:
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


def _read_bf16(gguf_path: Path, data_offset: int, tensor: _TensorInfo) -> mx.array:
    count = math.prod(tensor.shape)
    with gguf_path.open("rb") as file:
        file.seek(data_offset + tensor.offset)
        raw = file.read(count * 2)
    bits = mx.array(memoryview(raw).cast("H"))  # GGUF and every MLX host are little-endian
    return bits.view(mx.bfloat16).reshape(tuple(reversed(tensor.shape)))
