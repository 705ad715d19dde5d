"""One stream per model family on an NVIDIA GPU: decode tokens/s of each family's real
shape in bfloat16 (random weights), as the engine loads it, against the bandwidth limit.

    python3 bench/gpu_families.py --out DIR [--families llama,qwen3,gemma3] [--tokens 128]
        [--tokenizer var/models/smollm2-135m-instruct] [--bandwidth 3.35e12]

Each family's folder is written once (config, random bf16 weights, the tokenizer; kept
under --work for the next run) and loaded by `inference.engine.load_model`, which gives a
model the CUDA decode step where it takes it (cuda_decode.py) and leaves MLX's own graph
otherwise. A 32-token prompt, then
`--tokens` greedy one-token steps through the model and its mlx-lm caches, `mx.eval` a
step (the median step counts). The limit: the weights one step reads (every parameter
but an untied embedding table) over the GPU's memory bandwidth (`--bandwidth`, bytes/s:
3.35e12 for an H100 SXM, 4.8e12 for an H200). Writes DIR/gpu_families.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from families import SHAPES, step_times, weight_bytes  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
PROMPT = 32


def build_folder(name: str, folder: Path, tokenizer: Path) -> Path:
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import save_model

    model_type, shape = SHAPES[name]
    config = {"model_type": model_type, "torch_dtype": "bfloat16", **shape}
    written = folder / "config.json"
    if written.exists() and json.loads(written.read_text()) == config:
        return folder  # an earlier run's (runs that alternate libraries share it)
    module = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(0)
    model = module.Model(module.ModelArgs.from_dict(config))
    model.update(tree_map(lambda p: (p * 0.5).astype(mx.bfloat16), model.parameters()))
    mx.eval(model.parameters())
    folder.mkdir(parents=True, exist_ok=True)
    save_model(folder, model, donate_model=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for file in TOKENIZER_FILES:
        if (tokenizer / file).exists():
            shutil.copy(tokenizer / file, folder / file)
    return folder


def measure(name: str, folder: Path, tokens: int) -> dict:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from inference.engine import load_model

    model = load_model(folder).model
    cache = make_prompt_cache(model)
    logits = model(mx.array([list(range(100, 100 + PROMPT))]), cache=cache)
    times = step_times(model, cache, mx.argmax(logits[:, -1:, :], axis=-1), tokens)
    step = statistics.median(times[len(times) // 4 :])  # after the kernels are compiled
    return {
        "model_class": type(model).__name__,
        "bytes": weight_bytes(model, SHAPES[name][1]),
        "step_ms": round(step * 1000, 3),
        "decode_tps": round(1 / step, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", default="llama,qwen3,gemma3")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument(
        "--tokenizer", type=Path, default=HERE.parent / "var/models/smollm2-135m-instruct"
    )
    parser.add_argument("--bandwidth", type=float, default=3.35e12)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-families"))
    args = parser.parse_args()
    wanted = args.families.split(",")
    results = {}
    for name in SHAPES:
        if not any(name.startswith(w) for w in wanted):
            continue
        folder = build_folder(name, args.work / name.split()[0], args.tokenizer)
        row = measure(name, folder, args.tokens)
        limit = args.bandwidth / row["bytes"]
        row |= {"limit_tps": round(limit, 1), "of_limit": round(row["decode_tps"] / limit, 3)}
        results[name] = row
        print(name, json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_families.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
