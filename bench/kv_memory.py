"""KV cache memory per 1,000 context tokens: plain, 8-bit and 4-bit (`make bench`).

    .venv/bin/python bench/kv_memory.py

A 1,000-token prompt is prefilled into mlx-lm's BatchKVCache, the cache the engine batches
with; the same keys and values are then held as our RowsQuantizedKVCache, and one row
of each is measured. A plain cache holds the model's activation dtype: float32 on the CPU
fast path the lab serves with; the float16 figures (a GPU's) hold the same keys cast.
Quantized scales and biases take the dtype of what they quantize.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from inference.engine import load_model  # noqa: E402

MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
TOKENS = 1000


def prefilled(model) -> list:
    import mlx.core as mx

    from inference.engine.kv.rows import RowsKVCache

    cache = [RowsKVCache([0]) for _ in model.layers]
    model(mx.array([list(range(100, 100 + TOKENS))]), cache=cache)
    mx.eval([layer.state for layer in cache])
    return cache


def row_bytes(cache: list, bits: int | None) -> int:
    from inference.engine.kv.rows import RowsQuantizedKVCache

    if bits is not None:
        cache = [RowsQuantizedKVCache.from_rows(c, group_size=64, bits=bits) for c in cache]
    return sum(layer.extract(0).nbytes for layer in cache)


def as_dtype(cache: list, dtype) -> list:
    for layer in cache:
        layer.keys, layer.values = layer.keys.astype(dtype), layer.values.astype(dtype)
    return cache


def main() -> None:
    import mlx.core as mx

    cache = prefilled(load_model(MODEL).model)
    print(f"KV cache bytes per {TOKENS:,} context tokens, smollm2-135m-instruct (groups of 64):")
    for label, dtype in (("float32, as served on CPU", mx.float32), ("16-bit", mx.float16)):
        cache = as_dtype(cache, dtype)
        plain = row_bytes(cache, None)
        cells = [f"plain {plain / 2**20:.2f} MiB"]
        for bits in (8, 4):
            size = row_bytes(cache, bits)
            cells.append(f"{bits}-bit {size / 2**20:.2f} MiB ({size / plain:.0%})")
        print(f"  {label}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
