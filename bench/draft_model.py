"""The draft model of the speculative bench: a lab-made quantized copy of the default model
(nothing smaller with its vocabulary is on this machine), made once under var/bench.

Run as a script (a setup step of bench/servers.py) it makes the copy if it is missing.
The copy is the default model dequantized and quantized again to 4 bits in groups of 64
(the default's own groups are 32; 128 would not divide the 576-wide layers, which then
stay unquantized, 5x slower), with mlx-lm's convert: the same vocabulary, a slightly
different model, and on the CPU's quantized kernel as the target is.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAFT_NAME = "smollm2-135m-draft-q4g64"
DRAFT_DIR = ROOT / "var" / "bench" / DRAFT_NAME
SOURCE_DIR = ROOT / "var" / "models" / "smollm2-135m-instruct"


def make_draft_model(source: Path = SOURCE_DIR, folder: Path = DRAFT_DIR) -> Path:
    if (folder / "config.json").is_file():
        return folder
    from mlx_lm.convert import convert

    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        dense = Path(scratch) / "dense"
        convert(str(source), str(dense), dequantize=True)
        convert(str(dense), str(folder), quantize=True, q_bits=4, q_group_size=64)
    return folder


if __name__ == "__main__":
    sys.exit(0 if make_draft_model() else 1)
