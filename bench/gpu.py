"""The GPU bench: MLX Lab's engine against mlx-lm and PyTorch + transformers, on one GPU.

    python3 bench/gpu.py --out DIR                      # everything (about 6 minutes on an H200)
    python3 bench/gpu.py --out DIR --shapes tiny-bf16 --tokens 16   # a smoke run, CPU too
    python3 bench/gpu.py --out DIR --part restart       # first request after a restart only
    python3 bench/gpu.py --out DIR --shapes '' --model-dirs var/models/smollm2-135m-instruct
    python3 bench/gpu.py --out DIR --part speed --no-torch --compare-compiled-mlp
    python3 bench/gpu.py --out DIR --part speed --no-torch --compare-fused --shapes llama-1b-bf16
    python3 bench/gpu.py --out DIR --part speed --no-torch --compare-kernels --shapes llama-1b-bf16
    python3 bench/gpu.py --out DIR --part speed --no-torch --compare-step --shapes llama-1b-bf16

Runs where MLX has its CUDA backend (`make setup` on a GPU machine, or the recipe in
docs/BENCHMARKS.md for the lent H200). Every row is measured in this one process, side
by side, on the same random-weight model; the share of the bandwidth limit is tokens/s
against what the measured copy bandwidth allows when each step reads every weight once.
Writes DIR/gpu.json and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from bench.gpu_models import SHAPES, build_folder, weight_bytes  # noqa: E402
from bench.gpu_targets import judge, print_verdicts  # noqa: E402
from bench.gpu_torch import torch_rows  # noqa: E402

TOKENIZER = ROOT / "var" / "models" / "smollm2-135m-instruct"
PROMPT = 32  # prompt tokens of the decode rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="llama-1b-bf16,llama-1b-4bit,smollm2-135m-4bit")
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per row")
    parser.add_argument("--batches", default="8,32,64")
    parser.add_argument("--part", choices=["all", "speed", "restart"], default="all")
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    parser.add_argument(
        "--model-dirs",
        default="",
        help="real models' folders (mlx-lm's format, comma-separated), measured after the "
        "shapes as they are, without transformers; --shapes '' for these alone",
    )
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--skip-cold", action="store_true", help="no run without warm-up")
    parser.add_argument("--kernels-from", type=Path, help="a kernels.tar.gz of an earlier run")
    parser.add_argument(
        "--compare-compiled-mlp",
        action="store_true",
        help="only engine rows, with the compiled MLP half at every batch size and with it off",
    )
    parser.add_argument(
        "--compare-fused",
        action="store_true",
        help="only engine rows, with fused q/k/v and gate/up projections and without",
    )
    parser.add_argument(
        "--compare-kernels",
        action="store_true",
        help="only engine rows, fused projections with decode_kernels.py's kernels and without",
    )
    parser.add_argument(
        "--engine-only",
        action="store_true",
        help="only the engine's rows (with its prompt cache and without), no mlx-lm rows",
    )
    parser.add_argument(
        "--compare-step",
        action="store_true",
        help="only engine rows, with the CUDA decode step (cuda_decode.py) and without",
    )
    args = parser.parse_args()
    if not args.no_torch:
        # Before inference.engine, which otherwise keeps PyTorch out of transformers for
        # the process's life (inference/engine/acceleration/torch_free.py); the torch rows need it.
        with contextlib.suppress(ImportError):
            import torch  # noqa: F401
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mlxlab-gpu-"))
    # The speed rows reuse what the restart rows compiled (the kernel cache is per process).
    os.environ.setdefault("MLX_PTX_CACHE_DIR", str(work / "kernels-kept"))
    if args.kernels_from:
        Path(os.environ["MLX_PTX_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["tar", "xzf", str(args.kernels_from), "-C", os.environ["MLX_PTX_CACHE_DIR"]]
        )
    report = {"environment": environment(), "bandwidth_gbs": copy_bandwidth(), "models": {}}
    print(json.dumps(report["environment"]), f"copy bandwidth {report['bandwidth_gbs']:.0f} GB/s")
    shapes = [SHAPES[name] for name in args.shapes.split(",") if name]
    models = [Path(folder) for folder in args.model_dirs.split(",") if folder]
    if args.part in ("all", "restart"):
        if shapes:
            restart_shape = shapes[1] if len(shapes) > 1 else shapes[0]
            folder = build_folder(restart_shape, work / restart_shape.name, args.tokenizer)
        else:
            folder = models[0]
        report["restart"] = restart_rows(folder, work, skip_cold=args.skip_cold)
        save(args.out, report)
        keep_kernels(args.out)
    if args.part in ("all", "speed"):
        batches = [int(b) for b in args.batches.split(",")]
        flags = {"kernels": args.compare_kernels, "fused": args.compare_fused,
                 "mlp": args.compare_compiled_mlp, "step": args.compare_step,
                 "engine": args.engine_only}  # fmt: skip
        compare = next((name for name, on in flags.items() if on), None)
        for source in shapes + models:
            shape = source if not isinstance(source, Path) else None
            name = shape.name if shape else source.name
            folder = build_folder(shape, work / name, args.tokenizer) if shape else source
            limit = report["bandwidth_gbs"] * 1e9 / weight_bytes(folder)
            rows = LiveRows(lambda: save(args.out, report))
            report["models"][name] = {
                "weight_bytes": weight_bytes(folder),
                "one_stream_limit_tps": round(limit, 1),
                "rows": rows,
            }
            speed_rows(folder, args.tokens, batches, rows, compare)
            if not args.no_torch and shape is not None and shape.bits is None:
                rows.update(torch_rows(shape, args.tokens, batches))
            print_model(name, report["models"][name])
    keep_kernels(args.out)
    print(json.dumps(report.get("restart", {}), indent=1))
    verdicts = judge(report)
    report["targets"] = [vars(verdict) for verdict in verdicts]
    save(args.out, report)
    print_verdicts(verdicts)


def keep_kernels(out: Path) -> None:
    """Send the compiled kernels back (out/kernels.tar.gz) when small enough to carry again.

    A fresh GPU machine compiles for minutes; unpacked into MLX_PTX_CACHE_DIR before
    a run (--kernels-from), the next one starts warm.
    """
    folder = Path(os.environ["MLX_PTX_CACHE_DIR"])
    if folder.is_dir():
        subprocess.run(["tar", "czf", str(out / "kernels.tar.gz"), "-C", str(folder), "."])


def save(out: Path, report: dict) -> None:
    (out / "gpu.json").write_text(json.dumps(report, indent=1))


def environment() -> dict:
    import mlx.core as mx

    return {
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "device_info": {k: str(v) for k, v in mx.device_info().items()},
    }


def copy_bandwidth() -> float:
    """GB/s of a large device copy, bytes read plus bytes written: the memory ceiling."""
    import mlx.core as mx

    source = mx.random.normal((256 * 1024 * 1024,)).astype(mx.bfloat16)  # 512 MB
    mx.eval(source)
    times = []
    for _ in range(10):
        started = time.perf_counter()
        mx.eval(source + 0)
        times.append(time.perf_counter() - started)
    return 2 * source.nbytes / statistics.median(times) / 1e9


# -- decode speed, in this process ------------------------------------------------------


class LiveRows(dict):
    """A model's rows, written to disk as each one lands: a call cut short keeps them."""

    def __init__(self, save) -> None:
        super().__init__()
        self._save = save

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._save()

    def update(self, other) -> None:
        for key, value in other.items():
            self[key] = value


def speed_rows(
    folder: Path, tokens: int, batches: list[int], rows: dict, compare: str | None = None
) -> dict:
    from mlx_lm import load

    if compare:  # the engine alone: mlx-lm's rows do not depend on the switch
        alternate = {"fused": fused_rows, "kernels": kernels_rows, "mlp": compiled_mlp_rows,
                     "step": step_rows, "engine": engine_rows}[compare]  # fmt: skip
        rows.update(alternate(folder, tokens, batches))
        return rows
    model, _ = load(str(folder))
    vocab = model.args.vocab_size
    rows["forward_sync_tps"] = forward_rate(model, tokens, vocab)
    rows["mlx_lm_generate_step_tps"] = mlx_lm_stream(model, tokens, vocab)
    for batch in [1, *batches]:
        rows[f"mlx_lm_batch{batch}_tps"] = mlx_lm_batch(model, batch, tokens, vocab)
    mixed = max(batches[:2])
    rows[f"mlx_lm_batch{mixed}_mixed_tps"] = mlx_lm_batch(model, mixed, tokens, vocab, True)
    rows["mlx_lm_ttft_512_s"] = mlx_lm_ttft(model, vocab)
    del model
    rows.update(engine_rows(folder, tokens, batches))
    return rows


def mixed_prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """Prompts of 16 to 48 tokens: rows of a served batch rarely share one length."""
    draw = random.Random(seed)
    return [[draw.randrange(vocab) for _ in range(16 + i * 7 % 33)] for i in range(count)]


def prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    draw = random.Random(seed)
    return [[draw.randrange(3, vocab) for _ in range(length)] for _ in range(count)]


def forward_rate(model, tokens: int, vocab: int) -> float:
    """One row, one forward and argmax per step, waited on each step: no pipelining."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    rate = 0.0
    for _ in range(2):  # the first pass compiles
        cache = make_prompt_cache(model)
        token = mx.array([prompts(1, PROMPT, vocab)[0]])
        token = mx.argmax(model(token, cache=cache)[:, -1, :], axis=-1)[:, None]
        mx.eval(token)
        started = time.perf_counter()
        for _ in range(tokens):
            token = mx.argmax(model(token, cache=cache)[:, -1, :], axis=-1)[:, None]
            mx.eval(token)
        rate = max(rate, tokens / (time.perf_counter() - started))
    return round(rate, 1)


def mlx_lm_stream(model, tokens: int, vocab: int) -> float:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    prompt = mx.array(prompts(1, PROMPT, vocab)[0])
    for _ in range(2):  # the first pass compiles
        stamps = []
        for _ in generate_step(prompt, model, max_tokens=tokens):
            stamps.append(time.perf_counter())
    return round((len(stamps) - 1) / (stamps[-1] - stamps[0]), 1)


def mlx_lm_batch(model, batch: int, tokens: int, vocab: int, mixed: bool = False) -> float:
    """Aggregate tokens/s of `batch` rows through mlx-lm's BatchGenerator, prefill included."""
    from mlx_lm.generate import BatchGenerator

    best = 0.0
    for attempt in range(2):  # the first pass compiles
        generator = BatchGenerator(model, completion_batch_size=batch, prefill_batch_size=8)
        started = time.perf_counter()
        rows = (
            mixed_prompts(batch, vocab, attempt)
            if mixed
            else prompts(batch, PROMPT, vocab, attempt)
        )
        uids = set(generator.insert(rows, [tokens] * batch))
        produced = 0
        while uids:
            for response in generator.next_generated():
                produced += 1
                if response.finish_reason is not None:
                    uids.discard(response.uid)
        best = max(best, produced / (time.perf_counter() - started))
        generator.close()
    return round(best, 1)


def mlx_lm_ttft(model, vocab: int) -> float:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    times = []
    for seed in range(3):
        prompt = mx.array(prompts(1, 512, vocab, seed)[0])
        started = time.perf_counter()
        next(generate_step(prompt, model, max_tokens=1))
        times.append(time.perf_counter() - started)
    return round(min(times[1:]), 4)


def engine_rows(folder: Path, tokens: int, batches: list[int]) -> dict:
    from inference.engine.caching.prompt_cache import PromptCacheConfig

    rows = engine_speed(folder, tokens, batches, PromptCacheConfig(), "engine")
    # What the prompt cache's bookkeeping costs: the largest batch and TTFT without it.
    off = PromptCacheConfig(max_entries=0)
    rows.update(engine_speed(folder, tokens, batches[-1:], off, "engine_no_prompt_cache"))
    return rows


def compiled_mlp_rows(folder: Path, tokens: int, batches: list[int]) -> dict:
    """The engine with each layer's MLP half compiled at every batch size, and without it
    (inference/engine/acceleration/compiled_mlp.py): the figures its batch-size threshold comes from."""
    from inference.engine.acceleration.compiled_mlp import MIN_BATCH_VARIABLE, VARIABLE
    from inference.engine.acceleration.fused_projections import VARIABLE as FUSED

    on = "force" if os.environ.get(VARIABLE) == "force" else "1"  # force: a CPU smoke run
    variants = {
        "engine_mlp_compiled": {VARIABLE: on, MIN_BATCH_VARIABLE: "1", FUSED: "0"},
        "engine_mlp_plain": {VARIABLE: "0", FUSED: "0"},
    }
    return alternated_rows(folder, tokens, batches, variants)


def fused_rows(folder: Path, tokens: int, batches: list[int]) -> dict:
    """The engine with fused q/k/v and gate/up projections and without them
    (inference/engine/acceleration/fused_projections.py), and whether their greedy texts are equal."""
    from inference.engine.acceleration.fused_projections import VARIABLE

    on = "force" if os.environ.get(VARIABLE) == "force" else "1"  # force: a CPU smoke run
    variants = {"engine_fused": {VARIABLE: on}, "engine_unfused": {VARIABLE: "0"}}
    return alternated_rows(folder, tokens, batches, variants)


def kernels_rows(folder: Path, tokens: int, batches: list[int]) -> dict:
    """The engine's fused layers with decode_kernels.py's two custom CUDA kernels on their
    one-token steps and without them, and whether their greedy texts are equal."""
    from inference.engine.acceleration.decode_kernels import VARIABLE
    from inference.engine.acceleration.fused_projections import VARIABLE as FUSED

    variants = {
        "engine_kernels": {FUSED: "1", VARIABLE: os.environ.get(VARIABLE, "1")},
        "engine_fused": {FUSED: "1", VARIABLE: "0"},
    }
    return alternated_rows(folder, tokens, batches, variants)


def step_rows(folder: Path, tokens: int, batches: list[int]) -> dict:
    """The engine with the CUDA decode step (inference/engine/acceleration/cuda_decode.py) and with the
    fused layers' MLX step alone, and whether their greedy texts are equal."""
    from inference.engine.acceleration.cuda_decode import VARIABLE

    variants = {"engine_cuda_step": {VARIABLE: "1"}, "engine_fused": {VARIABLE: "0"}}
    return alternated_rows(folder, tokens, batches, variants)


def alternated_rows(folder: Path, tokens: int, batches: list[int], variants: dict) -> dict:
    """Engines loaded at once under each variant's environment, their runs alternated.

    Three runs of each per row: run one after the other, minutes apart, the same variant
    moved by 20-40% on the lent H200. Rows: the best run, the median (`_med`), and
    `_same_text`: whether every run's greedy text was the same in every variant.
    """
    engines = {label: started_engine(folder, max(batches), env) for label, env in variants.items()}
    try:
        rows = {
            f"{label}_warm_up_s": round(e.stats.warm_up_seconds, 2) for label, e in engines.items()
        }
        vocab = next(iter(engines.values())).vocab_size
        mixed = max(batches[:2])
        runs = {
            "stream": lambda e, seed, texts: engine_stream(
                e, prompts(1, PROMPT, vocab, seed)[0], tokens, texts
            )[0]
        }
        for batch in [1, *batches]:
            runs[f"batch{batch}"] = lambda e, seed, texts, b=batch: engine_batch(
                e, prompts(b, PROMPT, vocab, seed), tokens, texts
            )
        runs[f"batch{mixed}_mixed"] = lambda e, seed, texts: engine_batch(
            e, mixed_prompts(mixed, vocab, seed), tokens, texts
        )
        for name, run in runs.items():
            rates = {label: [] for label in engines}
            same = True
            for seed in (11, 12, 13):
                outputs = []
                for label, engine in engines.items():
                    texts: list = []
                    rates[label].append(run(engine, seed, texts))
                    outputs.append(texts)
                same = same and all(texts == outputs[0] for texts in outputs)
            for label, values in rates.items():
                rows[f"{label}_{name}_tps"] = max(values)
                rows[f"{label}_{name}_med_tps"] = statistics.median(values)
            rows[f"{name}_same_text"] = same
            print(name, {k: v for k, v in rows.items() if f"_{name}_" in k}, same, flush=True)
        return rows
    finally:
        for engine in engines.values():
            engine.shutdown()


def started_engine(folder: Path, max_batch: int, env: dict[str, str]):
    """An engine (warmed up) whose model loaded with `env` set, and the environment as it was."""
    from inference.engine import Engine, EngineConfig, load_model

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # read when the engine loads the model
    try:
        config = EngineConfig(max_batch_size=max_batch, warm_up=True)  # the engine's prefill batch
        return as_served(Engine(lambda: load_model(folder), config=config).start())
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def as_served(engine):
    """The engine as its model worker runs it: what is loaded frozen out of the collector's
    sight (inference/engine/process/worker.py). Without it, in this process beside mlx-lm's rows,
    the H200 read 6,150-7,236 tok/s at 32 rows and 9,177-10,866 at 64 over three runs;
    with it 7,510 and 12,286 ("Tensor cores and overlapping kernels" in docs/BENCHMARKS.md's
    history: git show 02df74b:docs/BENCHMARKS.md)."""
    import gc

    gc.collect()
    gc.freeze()
    return engine


def engine_speed(folder: Path, tokens: int, batches: list[int], cache, label: str) -> dict:
    from inference.engine import Engine, EngineConfig, load_model

    config = EngineConfig(max_batch_size=max(batches), prompt_cache=cache, warm_up=True)
    engine = as_served(Engine(lambda: load_model(folder), config=config).start())
    vocab = engine.vocab_size
    try:
        rows = {f"{label}_warm_up_s": round(engine.stats.warm_up_seconds, 2)}
        stream = [engine_stream(engine, prompt, tokens) for prompt in prompts(3, PROMPT, vocab, 7)]
        rows[f"{label}_stream_tps"] = max(rate for rate, _ in stream)
        for batch in [1, *batches]:
            rows[f"{label}_batch{batch}_tps"] = max(
                engine_batch(engine, prompts(batch, PROMPT, vocab, seed), tokens)
                for seed in (11, 12)
            )
        mixed = max(batches[:2])
        rows[f"{label}_batch{mixed}_mixed_tps"] = max(
            engine_batch(engine, mixed_prompts(mixed, vocab, seed), tokens) for seed in (11, 12)
        )
        rows[f"{label}_ttft_512_s"] = min(
            engine_stream(engine, prompt, 1)[1] for prompt in prompts(3, 512, vocab, 21)
        )
        # One stream again, long after the warm-up: the 4-bit shape's first read 578 tok/s
        # with the prompt cache on and 888 with it off (docs/BENCHMARKS.md, "GPU: quantized
        # models").
        again = [engine_stream(engine, prompt, tokens) for prompt in prompts(3, PROMPT, vocab, 8)]
        rows[f"{label}_stream_again_tps"] = max(rate for rate, _ in again)
        return rows
    finally:
        engine.shutdown()


def engine_stream(
    engine, prompt: list[int], tokens: int, texts: list | None = None
) -> tuple[float, float]:
    """(decode tokens/s after the first token, seconds to the first token) of one request."""
    from inference.engine import GenerationRequest

    started = time.perf_counter()
    stamps = collect(engine, [GenerationRequest(prompt, max_tokens=tokens)], texts)[0]
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
    return round(rate, 1), round(stamps[0] - started, 4)


def engine_batch(
    engine, batch_prompts: list[list[int]], tokens: int, texts: list | None = None
) -> float:
    """Aggregate tokens/s of the rows, prefill included; each row's text into `texts`."""
    from inference.engine import GenerationRequest

    started = time.perf_counter()
    requests = [GenerationRequest(prompt, max_tokens=tokens) for prompt in batch_prompts]
    produced = sum(len(stamps) for stamps in collect(engine, requests, texts))
    return round(produced / (time.perf_counter() - started), 1)


@contextlib.contextmanager
def steps_profiled(runner, profiler):
    """Inside: the runner's steps (the engine thread only) run under `profiler`."""
    step = runner.step

    def profiled() -> int:
        profiler.enable()
        try:
            return step()
        finally:
            profiler.disable()

    runner.step = profiled
    try:
        yield
    finally:
        runner.step = step


def collect(engine, requests, texts: list | None = None) -> list[list[float]]:
    """Submit together; per request, the time each token's text arrived (and the text,
    into `texts`, when given)."""
    import threading

    from inference.protocol.events import Failed, Finished, TextDelta

    stamps: list[list[float]] = [[] for _ in requests]
    pieces: list[list[str]] = [[] for _ in requests]
    done = [threading.Event() for _ in requests]

    def emitter(index: int):
        def emit(event) -> None:
            if isinstance(event, TextDelta):
                stamps[index].append(time.perf_counter())
                pieces[index].append(event.text)
            elif isinstance(event, (Finished, Failed)):
                if isinstance(event, Finished):  # a delta may carry several tokens
                    missing = event.completion_tokens - len(stamps[index])
                    stamps[index].extend([stamps[index][-1]] * max(0, missing))
                done[index].set()

        return emit

    engine.submit_many([(request, emitter(i)) for i, request in enumerate(requests)])
    for event in done:
        event.wait(600)
    if texts is not None:
        texts.extend("".join(row) for row in pieces)
    return stamps


# -- the first request after a restart ---------------------------------------------------


def restart_rows(folder: Path, work: Path, *, skip_cold: bool = False) -> dict:
    """Fresh processes: no warm-up on an empty kernel cache, warm-up on one, then a restart."""
    rows = {}
    cold, kept = work / "kernels-cold", work / "kernels-kept"
    runs = [
        ("no_warm_up_empty_cache", cold, "off"),
        ("warm_up_empty_cache", kept, "on"),
        ("warm_up_after_restart", kept, "on"),
    ]
    for name, cache, warm in runs[1:] if skip_cold else runs:
        env = {**os.environ, "MLX_PTX_CACHE_DIR": str(cache)}
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, __file__, "--first-request", str(folder), "--warm-up", warm],
            env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        line = [text for text in result.stdout.splitlines() if text.startswith("{")]
        rows[name] = json.loads(line[-1]) if line else {"error": result.stderr[-2000:]}
        built = [text for text in result.stderr.splitlines() if "matmul kernels in" in text]
        if built:  # kernel_prebuild.py's own line: how many kernels, processes and seconds
            rows[name]["prebuild"] = built[-1].split("kernel_prebuild: ", 1)[-1]
        rows[name]["process_s"] = round(time.perf_counter() - started, 2)
        print(name, rows[name], flush=True)
    return rows


def first_request(folder: Path, warm: str) -> None:
    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    from inference.engine import Engine, EngineConfig, load_model

    config = EngineConfig(max_batch_size=8, warm_up=warm == "on")
    engine = Engine(lambda: load_model(folder), config=config).start()
    ready = time.perf_counter() - started
    vocab = engine.vocab_size
    _, ttft = engine_stream(engine, prompts(1, 512, vocab, 5)[0], 8)
    batch_started = time.perf_counter()
    engine_batch(engine, prompts(8, PROMPT, vocab, 6), 8)
    batch = time.perf_counter() - batch_started
    print(
        json.dumps(
            {
                "ready_s": round(ready, 2),
                "warm_up_s": round(engine.stats.warm_up_seconds, 2),
                "first_request_ttft_s": round(ttft, 3),
                "first_batch8_s": round(batch, 3),
            }
        ),
        flush=True,
    )
    engine.shutdown()


def print_model(name: str, entry: dict) -> None:
    limit = entry["one_stream_limit_tps"]
    print(f"\n{name}: {entry['weight_bytes'] / 1e9:.2f} GB, one-stream limit {limit:.0f} tok/s")
    for key, value in entry["rows"].items():
        one_stream = key.endswith("tps") and ("batch" not in key or "batch1_" in key)
        share = f"  {100 * value / limit:5.1f}% of limit" if one_stream else ""
        print(f"  {key:32} {value:>10}{share}")


if __name__ == "__main__":
    if "--first-request" in sys.argv:
        first_request(Path(sys.argv[sys.argv.index("--first-request") + 1]), sys.argv[-1])
    else:
        main()
