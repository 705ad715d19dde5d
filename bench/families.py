"""One stream per model family on the CPU: the fused native layers against mlx-lm's own
blocks (both on the quantized matmul kernel), on each family's real shape.

    .venv/bin/python bench/families.py [--families llama,qwen3] [--steps 16] [--prompt 128]

Each family's model is its real config's shape (layers, widths, heads, vocabulary, RoPE)
with random weights, quantized to 4 bits (group 64) as mlx_lm.convert quantizes; the
weights never exist in float32 all at once (MLX builds them lazily, quantized layer by
layer). Each (family, path) runs in a child process of its own: a prefill of `--prompt`
tokens, then `--steps` greedy one-token steps (median). The figure that compares
families is decode tokens/s times the bytes of weights a token reads, against Llama's:
a family's fused layers should stream its weights at least 80% as fast as Llama's do.
A mixture of experts reads its routed experts' share of the experts' bytes; its "mlx-lm"
path runs the experts on MLX's own gather_qmm, the fused one on the extension's
expert-grouped matmul (quantized_kernel.KernelSwitchLinear).
Writes var/bench/families.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench" / "families.json"

# The real configs' shapes (config.json of each model on the Hub), trimmed to what the
# architecture reads.
SHAPES: dict[str, tuple[str, dict]] = {
    "llama (Llama-3.2-1B)": (
        "llama",
        {
            "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
            "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": True, "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        },
    ),
    "qwen2 (Qwen2.5-0.5B)": (
        "qwen2",
        {
            "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
            "max_position_embeddings": 32768,
        },
    ),
    "qwen3 (Qwen3-0.6B)": (
        "qwen3",
        {
            "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
            "vocab_size": 151936, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "tie_word_embeddings": True, "max_position_embeddings": 40960,
        },
    ),
    "gemma3 (Gemma-3-1B)": (
        "gemma3_text",
        {
            "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
            "vocab_size": 262144, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
            "sliding_window": 512, "sliding_window_pattern": 6,
            "max_position_embeddings": 32768,
        },
    ),
    "olmo2 (OLMo-2-0425-1B)": (
        "olmo2",
        {
            "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 100352,
            "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
            "max_position_embeddings": 4096,
        },
    ),
    "granite (granite-3.3-2b)": (
        "granite",
        {
            "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 40,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49159,
            "rms_norm_eps": 1e-5, "rope_theta": 10000000.0, "tie_word_embeddings": True,
            "max_position_embeddings": 131072, "attention_multiplier": 0.015625,
            "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 8.0,
            "attention_bias": False, "mlp_bias": False,
        },
    ),
    "smollm3 (SmolLM3-3B)": (
        "smollm3",
        {
            "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
            "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256,
            "rms_norm_eps": 1e-6, "rope_theta": 5000000.0, "tie_word_embeddings": True,
            "max_position_embeddings": 65536, "no_rope_layer_interval": 4,
        },
    ),
    "phi3 (Phi-3.5-mini, LongRoPE)": (
        "phi3",
        {
            "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
            "rope_scaling": {"type": "longrope", "long_factor": [1.05] * 48,
                             "short_factor": [1.0] * 48},
        },
    ),
    "granitemoe (granite-3.1-3b-a800m)": (
        "granitemoe",
        {
            "hidden_size": 1536, "intermediate_size": 512, "num_hidden_layers": 32,
            "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 49155,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True,
            "max_position_embeddings": 4096, "attention_multiplier": 0.015625,
            "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 6.0,
            "attention_bias": False, "num_local_experts": 40, "num_experts_per_tok": 8,
        },
    ),
}  # fmt: skip
BASELINE = "llama (Llama-3.2-1B)"


def build(model_type: str, shape: dict):
    """The family's model, random weights quantized to 4 bits, on the engine's fast path."""
    import importlib

    import mlx.core as mx
    import mlx.nn as nn

    from inference.engine.acceleration import dense_weights
    from inference.engine.acceleration.dense_weights import FastPathOptions, apply_fast_path

    if os.environ.get("MLXLAB_FUSED_DECODE") == "0":  # mlx-lm's path: MLX's own experts too
        dense_weights.switch_layers = lambda model: []

    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(0)
    config = {"model_type": model_type, **shape}
    model = module.Model(module.ModelArgs.from_dict(config))
    model.set_dtype(mx.bfloat16)  # what a checkpoint holds; norms go back to float32 below
    nn.quantize(model, group_size=64, bits=4)
    for _, layer in model.named_modules():  # quantized a layer at a time: a low peak
        mx.eval(layer.parameters())
    norms = [(n, p.astype(mx.float32)) for n, p in _float_leaves(model)]
    model.load_weights(norms, strict=False)
    report = apply_fast_path(model, FastPathOptions(weights="kernel"))
    mx.eval(model.parameters())
    return model, report


def _float_leaves(model):
    import mlx.core as mx
    from mlx.utils import tree_flatten

    return [
        (name, p)
        for name, p in tree_flatten(model.parameters())
        if p.dtype == mx.bfloat16 and not name.endswith(("scales", "biases"))
    ]


def weight_bytes(model, shape: dict) -> int:
    """What one decode step reads: every parameter but the embedding table (a lookup reads
    one row of it), unless the output layer is that table (tied); of a mixture's experts,
    the routed ones' share."""
    from mlx.utils import tree_flatten

    parameters = dict(tree_flatten(model.parameters()))
    tied = not any(name.startswith("lm_head.") for name in parameters)
    routed = shape.get("num_experts_per_tok", 1) / shape.get("num_local_experts", 1)
    total = sum(
        p.nbytes * (routed if "switch_mlp" in name else 1)
        for name, p in parameters.items()
        if tied or "embed_tokens" not in name
    )
    return int(total)


def step_times(model, cache, token, steps: int) -> list[float]:
    """Seconds of each of `steps` greedy one-token steps from `token` (`mx.eval` a step)."""
    import mlx.core as mx

    times = []
    for _ in range(steps):
        started = time.perf_counter()
        token = mx.argmax(model(token, cache=cache)[:, -1:, :], axis=-1)
        mx.eval(token)
        times.append(time.perf_counter() - started)
    return times


def measure(name: str, prompt: int, steps: int) -> dict:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model, report = build(*SHAPES[name])
    cache = make_prompt_cache(model)
    tokens = mx.array([[(7 * i) % 1000 + 100 for i in range(prompt)]])
    mx.eval(model(tokens[:, :8], cache=make_prompt_cache(model)))  # warm-up
    started = time.perf_counter()
    logits = model(tokens, cache=cache)
    mx.eval(logits)
    prefill = prompt / (time.perf_counter() - started)
    times = step_times(model, cache, mx.argmax(logits[:, -1:, :], axis=-1), steps)
    return {
        "family": name,
        "fused_layers": report.layers_fused,
        "not_fused": report.not_fused,
        "weight_bytes": weight_bytes(model, SHAPES[name][1]),
        "prefill_tps": round(prefill, 1),
        "decode_tps": round(1 / statistics.median(times), 2),
    }


def run_child(name: str, fused: bool, prompt: int, steps: int) -> dict:
    env = dict(os.environ, MLXLAB_FUSED_DECODE="1" if fused else "0")
    command = [sys.executable, __file__, "--one", name, "--prompt", str(prompt)]
    out = subprocess.run(
        [*command, "--steps", str(steps)], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def report(rows: dict[str, dict]) -> list[str]:
    base = rows.get(BASELINE, {}).get("fused")
    per_byte = base["decode_tps"] * base["weight_bytes"] if base else None
    lines = [
        f"{'family (shape)':34s} {'weights':>8s} {'decode tok/s':>18s} {'prefill tok/s':>18s}"
        f" {'vs Llama/byte':>13s}",
        f"{'':34s} {'MB':>8s} {'mlx-lm / fused':>18s} {'mlx-lm / fused':>18s}",
    ]
    for name, row in rows.items():
        mine, theirs = row["fused"], row["generic"]
        versus = mine["decode_tps"] * mine["weight_bytes"] / per_byte if per_byte else None
        note = "" if mine["not_fused"] is None else f"  not fused: {mine['not_fused']}"
        lines.append(
            f"{name:34s} {mine['weight_bytes'] / 1e6:8.0f}"
            f" {theirs['decode_tps']:8.2f} / {mine['decode_tps']:7.2f}"
            f" {theirs['prefill_tps']:8.1f} / {mine['prefill_tps']:7.1f}"
            f" {'' if versus is None else f'{versus:12.2f}x'}{note}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", help="comma-separated prefixes of " + ", ".join(SHAPES))
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        sys.path.insert(0, str(ROOT))
        from inference.engine.process.startup import prepare_mlx_process

        prepare_mlx_process()
        print(json.dumps(measure(args.one, args.prompt, args.steps)), flush=True)
        return 0
    wanted = args.families.split(",") if args.families else None
    names = [n for n in SHAPES if not wanted or any(n.startswith(w) for w in wanted)]
    rows = {}
    for name in names:
        rows[name] = {
            "generic": run_child(name, False, args.prompt, args.steps),
            "fused": run_child(name, True, args.prompt, args.steps),
        }
        print(report({name: rows[name]})[-1], flush=True)
    print("\n".join(report(rows)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
