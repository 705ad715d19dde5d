"""Time to first token through the engine, its rows' first token out of the call that
prefills them (inference/engine/loop/generator.py); mlx-lm's `generate_step` beside it.
In-process, on CPU or GPU.

    python3 bench/first_token.py                     # the default model, 8/128/512 tokens
    python3 bench/first_token.py --model DIR --lengths 512 --runs 9
    python3 bench/first_token.py --shape llama-1b-bf16 --lengths 512   # bench/gpu.py's model

Runs take turns between the engine as served and the engine with an array mask on its
prompt steps instead of MLX's causal mode (inference/engine/kv/rows.py; on the CPU both
variants take the array). Same prompts (random tokens, the prompt cache off). Prints a
table; writes var/bench/first-token-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from gpu import TOKENIZER, as_served, engine_stream, prompts  # noqa: E402
from gpu_models import SHAPES, build_folder  # noqa: E402

DEFAULT_MODEL = ROOT / "var" / "models" / "smollm2-135m-instruct"
# (label, prompt steps' mask: kv/rows.py's default or the array)
VARIANTS = [("engine", None), ("engine_array_mask", False)]


def prompt_mask(causal: bool | None) -> None:
    """Prompt steps of an unpadded batch in MLX's causal mode where kv/rows.py's default
    says (None), or with the array mask (False)."""
    from inference.engine.kv import rows

    rows.CAUSAL_PROMPT_STEPS = causal


def generate_step_ttft(model, prompt: list[int]) -> float:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    started = time.perf_counter()
    next(generate_step(mx.array(prompt), model, max_tokens=1))
    return time.perf_counter() - started


def model_options(parser: argparse.ArgumentParser) -> None:
    """The model a first-token bench runs: a folder, or one of bench/gpu_models.py's shapes."""
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--shape", choices=sorted(SHAPES), help="a random-weight model instead")
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER, help="for --shape")


def started(args: argparse.Namespace, *, prompt_cache: bool = False):
    """The engine (warmed up, as served) on the model `args` name; the prompt cache off
    unless asked, so every run prefills its whole prompt."""
    from inference.engine import Engine, EngineConfig, load_model
    from inference.engine.caching.prompt_cache import PromptCacheConfig

    if args.shape:
        folder = Path(tempfile.mkdtemp(prefix="mlxlab-first-token-")) / args.shape
        args.model = build_folder(SHAPES[args.shape], folder, args.tokenizer)
    cache = PromptCacheConfig() if prompt_cache else PromptCacheConfig(max_entries=0)
    config = EngineConfig(prompt_cache=cache, warm_up=True)
    return as_served(Engine(lambda: load_model(args.model), config=config).start())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    model_options(parser)
    parser.add_argument("--lengths", default="8,128,512")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    engine = started(args)
    rows = {}
    try:
        for length in map(int, args.lengths.split(",")):
            batch = prompts(args.runs + 1, length, engine.vocab_size, seed=length)
            times = {label: [] for label, _ in VARIANTS}
            for index, prompt in enumerate(batch):
                turn = index % len(VARIANTS)  # each variant first by turns
                for label, causal in VARIANTS[turn:] + VARIANTS[:turn]:
                    prompt_mask(causal)
                    times[label].append(engine_stream(engine, prompt, 1)[1])
            prompt_mask(None)
            rows[length] = times
        # Apart from the engine's runs: MLX on this thread too would share its device.
        for length, times in rows.items():
            batch = prompts(args.runs + 1, length, engine.vocab_size, seed=length)
            times["generate_step"] = [
                generate_step_ttft(engine.loaded.model, prompt) for prompt in batch
            ]
    finally:
        engine.shutdown()
    # The first prompt warms what is left to warm: medians (and minimums) of the rest.
    table = {
        length: {k: [round(t * 1000, 2) for t in v] for k, v in times.items()}
        for length, times in rows.items()
    }
    labels = [label for label, _ in VARIANTS] + ["generate_step"]
    print("| prompt tokens | " + " | ".join(f"{label} (ms)" for label in labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for length, row in table.items():
        cells = [f"{statistics.median(row[k][1:]):.1f} (min {min(row[k][1:]):.1f})" for k in labels]
        print(f"| {length} | " + " | ".join(cells) + " |")
    out = ROOT / "var" / "bench" / f"first-token-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": str(args.model), "runs": args.runs, "ms": table}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
