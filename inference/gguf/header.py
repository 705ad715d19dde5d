"""The GGUF file header: metadata and tensor descriptors, read without loading tensors.

`mx.load` hides each tensor's GGUF type (it silently dequantizes some K-quants), and
the type decides what can be imported faithfully, so the header is parsed here.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class GGUFImportError(ValueError):
    """The GGUF file cannot be imported; the message names the problem."""


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
# GGUF metadata value types -> struct format (strings and arrays are handled apart).
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q"}
_SCALAR_FORMATS |= {11: "q", 12: "d"}
_VALUE_FLOAT32, _VALUE_STRING, _VALUE_ARRAY = 6, 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: innermost dimension first
    type_name: str
    offset: int


@dataclass(frozen=True)
class Header:
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int


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


def read_header(path: Path) -> Header:
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


def _parse_header(reader: _Reader) -> Header:
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
        tensors.append(TensorInfo(name, shape, type_name, offset))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT)) or 1
    data_offset = -(-reader.pos // alignment) * alignment
    return Header(metadata, tensors, data_offset)
