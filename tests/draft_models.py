"""Draft models for speculative decoding tests: a lab-made quantized copy of the default
model (same vocabulary), and a folder whose vocabulary differs by one token."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

# The copy's quantization: 4 bits in groups of 64, coarser than the default model's own
# groups of 32, so that it is a model of its own (it and the target disagree at times),
# yet agrees mostly; 4 bits and a group size dividing every layer's width (576, 1536), so
# that every layer runs on the CPU's quantized kernel as the target's do.
DRAFT_BITS = 4
DRAFT_GROUP_SIZE = 64


def quantized_copy(source: Path, folder: Path, *, bits: int = DRAFT_BITS) -> Path:
    """`source` dequantized, then quantized again to `bits` with mlx-lm's convert."""
    from mlx_lm.convert import convert

    with tempfile.TemporaryDirectory() as scratch:
        dense = Path(scratch) / "dense"
        convert(str(source), str(dense), dequantize=True)
        convert(str(dense), str(folder), quantize=True, q_bits=bits, q_group_size=DRAFT_GROUP_SIZE)
    return folder


def other_vocabulary_copy(source: Path, folder: Path) -> Path:
    """The weights of `source` (linked) with one token added to its tokenizer: a model
    whose vocabulary is not the default model's."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name != "tokenizer.json":
            (folder / item.name).symlink_to(item)
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    taken = max(token["id"] for token in tokenizer["added_tokens"])
    taken = max(taken, max(tokenizer["model"]["vocab"].values()))
    tokenizer["added_tokens"].append(
        {"id": taken + 1, "content": "<|draft_only|>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
    )  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder
