"""Attention heads padded with zeros, so that any number of ranks can shard a model.

mlx-lm's tensor-parallel `shard()` splits the query and key-value heads evenly across
the ranks, so a model whose heads a rank count does not divide cannot be served by that
many ranks: the default model's 9 query and 3 key-value heads go over three ranks, not
two. Adding key-value heads whose projections are all zero (each with its group of zero
query heads, and zero output-projection columns) changes nothing the model computes:
their attention output is multiplied by zeros and adds exact zeros to the sum. The padded
copy is written once next to the other derived files and reused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import mlx.core as mx

MAX_EXTRA_HEADS = 64


def shardable_path(path: Path, ranks: int, cache_dir: Path) -> Path:
    """`path` when `ranks` divide its heads; else a copy with zero heads added (made once)."""
    config = json.loads((path / "config.json").read_text())
    extra = extra_kv_heads(config, ranks)
    if extra == 0:
        return path
    target = cache_dir / f"{path.name}-{config['num_key_value_heads'] + extra}-kv-heads"
    if not (target / "config.json").exists():
        _write_padded(path, config, extra, target)
    return target


def extra_kv_heads(config: dict, ranks: int) -> int:
    """The fewest zero key-value heads to add so that `ranks` share the heads out evenly.

    transformers refuses a config whose hidden size the query heads do not divide (the
    tokenizer loads it), so counts that would break that are skipped.
    """
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    group, hidden = heads // kv_heads, config["hidden_size"]
    for extra in range(MAX_EXTRA_HEADS + 1):
        if (kv_heads + extra) % ranks == 0 and hidden % ((kv_heads + extra) * group) == 0:
            return extra
    raise ValueError(f"no padding up to {MAX_EXTRA_HEADS} heads lets {ranks} ranks share "
                     f"{heads} query and {kv_heads} key-value heads")  # fmt: skip


def _write_padded(source: Path, config: dict, extra: int, target: Path) -> None:
    weights: dict[str, mx.array] = {}
    for file in sorted(source.glob("*.safetensors")):
        weights.update(mx.load(str(file)))
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    group = heads // kv_heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}.self_attn"
        for name, added in (("q_proj", extra * group), ("k_proj", extra), ("v_proj", extra)):
            for key in [k for k in weights if k.startswith(f"{prefix}.{name}.")]:
                weights[key] = _add_rows(weights[key], added * head_dim)
        columns = _input_columns(config, f"{prefix}.o_proj", head_dim * extra * group)
        for part, count in columns.items():
            key = f"{prefix}.o_proj.{part}"
            zeros = mx.zeros((weights[key].shape[0], count), weights[key].dtype)
            weights[key] = mx.concatenate([weights[key], zeros], axis=1)
    padded = {**config, "num_attention_heads": (kv_heads + extra) * group,
              "num_key_value_heads": kv_heads + extra, "head_dim": head_dim}  # fmt: skip
    # Written aside and renamed: ranks on one host may pad the same model at once.
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for file in source.iterdir():
            if file.is_file() and not file.name.endswith(".safetensors") and file.name not in (
                "config.json", "model.safetensors.index.json"
            ):  # fmt: skip
                shutil.copy(file, scratch / file.name)
        mx.save_safetensors(str(scratch / "model.safetensors"), weights, {"format": "mlx"})
        (scratch / "config.json").write_text(json.dumps(padded, indent=2) + "\n")
        os.rename(scratch, target)
    except OSError:
        if not (target / "config.json").exists():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _add_rows(array: mx.array, rows: int) -> mx.array:
    """Output rows (weights, quantized scales and biases, a bias vector) for new heads."""
    zeros = mx.zeros((rows, *array.shape[1:]), array.dtype)
    return mx.concatenate([array, zeros])


def _input_columns(config: dict, layer: str, inputs: int) -> dict[str, int]:
    """How many columns `inputs` more input features take in each of a projection's arrays:
    packed 32-bit words of `bits` each for quantized weights, one per group for scales and
    biases, one each for a float weight."""
    quantization = config.get("quantization")
    if not quantization:
        return {"weight": inputs}
    own = quantization.get(layer)
    settings = own if isinstance(own, dict) else quantization
    bits, group_size = settings["bits"], settings["group_size"]
    per_group = inputs // group_size
    return {"weight": inputs * bits // 32, "scales": per_group, "biases": per_group}
