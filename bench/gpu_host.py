"""Where the engine's decode step spends host time on the GPU, code trees side by side.

    python3 bench/gpu_host.py --out DIR --roots .,.gpu/wt      # two trees, alternated
    python3 bench/gpu_host.py --out DIR --shape tiny-bf16 --tokens 16   # a CPU smoke run

The parent builds the random-weight model once (bench/gpu_models.py), then runs one child
process per code tree (`--roots`: folders holding an `inference/` package, e.g. the
checkout and a copy of a branch), alternated for `--rounds`, so that the machine's drift
falls on every tree alike. Each child starts the engine of its tree (warmed up) and reads,
greedy, 32-token prompts:

- one stream: decode tokens/s after the first token;
- each batch: aggregate tokens/s with prefill (as bench/gpu.py), and the decode step alone:
  the median time between the runner's steps while the batch is full (`step_ms`);
- one more run per batch with MLX's eval calls, the model's forward and the runner's
  postprocessing timed (per step, over the run): where the host's time goes;
- a cProfile of the engine thread at the largest batch (DIR/profile_<tree>_<round>.txt).

`--prefill 8,32` alternates engine settings instead (or as well): each child's
`prefill_batch_size`, 0 for the engine's own default. Odd rounds run the variants in the
reverse order, since the first child of a round tends to read slower.

Every child's greedy texts are compared with the first tree's. Writes DIR/gpu_host.json.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PROMPT = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--roots", default=".")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--shape", default="llama-1b-bf16")
    parser.add_argument("--tokenizer", type=Path, default=HERE / "var/models/smollm2-135m-instruct")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--prefill",
        default="0",
        help="prefill_batch_size per child, comma-separated; 0: the engine's default",
    )
    parser.add_argument(
        "--logprobs-batch",
        type=int,
        default=0,
        help="also a batch of rows asking for top-5 logprobs",
    )
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), args)
        return
    sys.path.insert(0, str(HERE))
    from bench.gpu_models import SHAPES, build_folder

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mlxlab-host-"))
    os.environ.setdefault("MLX_PTX_CACHE_DIR", str(work / "kernels"))  # one compile for all
    folder = build_folder(SHAPES[args.shape], work / args.shape, args.tokenizer)
    roots = args.roots.split(",")
    variants = [(root, prefill) for root in roots for prefill in args.prefill.split(",")]
    report: dict = {"roots": roots, "runs": []}
    texts: dict = {}
    for round_ in range(args.rounds):
        for root, prefill in variants if round_ % 2 == 0 else variants[::-1]:
            label = f"{Path(root).resolve().name}_p{prefill}_{round_}"
            command = [sys.executable, __file__, "--child", root, str(folder), "--label", label]
            command += ["--out", str(args.out), "--tokens", str(args.tokens)]
            command += ["--batches", args.batches, "--logprobs-batch", str(args.logprobs_batch)]
            command += ["--prefill", prefill]
            result = subprocess.run(command, capture_output=True, text=True, timeout=500)
            lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
            if not lines:
                print(label, "failed:", result.stderr[-3000:], flush=True)
                continue
            row = json.loads(lines[-1])
            row.update(root=root, round=round_, prefill=prefill)
            texts.setdefault("first", row.pop("texts"))
            row["same_text"] = texts["first"] == row.pop("texts", texts["first"])
            report["runs"].append(row)
            (args.out / "gpu_host.json").write_text(json.dumps(report, indent=1))
            print(json.dumps(row), flush=True)
    print_table(report["runs"])


def print_table(runs: list[dict]) -> None:
    print(
        "\nroot prefill round | stream tok/s | batch: tok/s with prefill, best/med ; step ms ; host"
    )
    for row in runs:
        cells = [f"{row['root']} p{row['prefill']} {row['round']}", f"{row['stream_tps']:.0f}"]
        for key, entry in row["batches"].items():
            parts = " ".join(f"{k} {v:.3f}" for k, v in entry["host_ms"].items())
            cells.append(
                f"b{key}: {entry['tps']:.0f}/{entry['tps_med']:.0f} ; "
                f"{entry['step_ms']:.3f} ms ({int(key) / entry['step_ms'] * 1e3:.0f} tok/s) ; "
                f"{parts}"
            )
        if "logprobs" in row:
            entry = row["logprobs"]
            cells.append(
                f"b{entry['batch']} logprobs: {entry['tps']:.0f}/{entry['tps_med']:.0f} ; "
                f"{entry['step_ms']:.3f} ms"
            )
        print(" | ".join(cells), f"| same text {row['same_text']}")


# -- the child: one code tree's engine ------------------------------------------------


def child(root: Path, folder: Path, args) -> None:
    sys.path.insert(0, str(root.resolve()))
    from inference.engine.process.startup import prepare_mlx_process

    prepare_mlx_process()  # before mlx.core: the CPU's BLAS
    from inference.engine import Engine, EngineConfig, load_model

    sys.path.insert(1, str(HERE))
    from bench.gpu import as_served, collect, engine_batch, engine_stream, prompts

    batches = [int(b) for b in args.batches.split(",")]
    options = {"prefill_batch_size": int(args.prefill)} if int(args.prefill) else {}
    config = EngineConfig(max_batch_size=max(batches), warm_up=True, **options)
    engine = as_served(Engine(lambda: load_model(folder), config=config).start())
    vocab = engine.vocab_size
    try:
        row: dict = {"label": args.label, "warm_up_s": round(engine.stats.warm_up_seconds, 2)}
        row["prefill_batch_size"] = engine.runner.config.prefill_batch_size
        streams = [engine_stream(engine, p, args.tokens)[0] for p in prompts(3, PROMPT, vocab, 7)]
        row["stream_tps"], row["stream_tps_med"] = max(streams), statistics.median(streams)
        row["batches"], texts = {}, []
        for batch in batches:
            periods = StepPeriods(engine.runner, batch)
            rates = []
            for seed in (11, 12, 13):
                with periods:
                    rates.append(
                        engine_batch(engine, prompts(batch, PROMPT, vocab, seed), args.tokens)
                    )
            with HostTimes(engine) as host:
                collect(engine, requests(prompts(batch, PROMPT, vocab, 14), args.tokens), texts)
            row["batches"][batch] = {
                "tps": max(rates),
                "tps_med": statistics.median(rates),
                "step_ms": periods.median_ms(),
                "host_ms": host.per_step_ms(),
            }
        if args.logprobs_batch:
            row["logprobs"] = logprobs_rows(engine, args.logprobs_batch, args.tokens, vocab)
        profile(engine, batches[-1], args, vocab)
        row["logprob_rows_us"] = logprob_rows_cost(batches[-1], vocab)
        row["texts"] = texts
        print(json.dumps(row), flush=True)
    finally:
        engine.shutdown()


def requests(batch_prompts: list[list[int]], tokens: int, **options) -> list:
    from inference.engine import GenerationRequest

    return [GenerationRequest(prompt, max_tokens=tokens, **options) for prompt in batch_prompts]


def logprobs_rows(engine, batch: int, tokens: int, vocab: int) -> dict:
    """A batch whose every row asks for its tokens' logprobs and top 5: tok/s with prefill
    (best, median of 3) and the decode step alone."""
    from bench.gpu import collect, prompts

    periods, rates = StepPeriods(engine.runner, batch), []
    for seed in (21, 22, 23):
        started = time.perf_counter()
        with periods:
            rows = requests(
                prompts(batch, PROMPT, vocab, seed), tokens, logprobs=True, top_logprobs=5
            )
            produced = sum(map(len, collect(engine, rows)))
        rates.append(round(produced / (time.perf_counter() - started), 1))
    return {"batch": batch, "tps": max(rates), "tps_med": statistics.median(rates),
            "step_ms": periods.median_ms()}  # fmt: skip


class StepPeriods:
    """The time between the starts of consecutive runner steps while `batch` rows decode."""

    def __init__(self, runner, batch: int) -> None:
        self.runner, self.batch, self.periods = runner, batch, []

    def __enter__(self):
        runner, step, last = self.runner, self.runner.step, [None]

        def timed() -> int:
            now = time.perf_counter()
            full = runner.size == self.batch
            if full and last[0] is not None:
                self.periods.append(now - last[0])
            last[0] = now if full else None
            return step()

        runner.step = timed
        return self

    def __exit__(self, *exc) -> None:
        del self.runner.step  # the class's method again

    def median_ms(self) -> float:
        return round(statistics.median(self.periods) * 1e3, 4) if self.periods else 0.0


class HostTimes:
    """Seconds a step spends in MLX's eval calls (C++, the GIL released), the model's
    Python forward (graph building), and the runner's postprocessing, over one run."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter = collections.Counter()
        self._undo: list = []

    def _wrap(self, owner, name: str, label: str, *, by_caller: bool = False) -> None:
        original = getattr(owner, name)
        seconds, calls = self.seconds, self.calls

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                seconds[label] += spent
                calls[label] += 1
                if by_caller:  # which function waited: the step's, a prefill's, a store's
                    seconds[f"{label} in {sys._getframe(1).f_code.co_name}"] += spent

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def __enter__(self):
        import mlx.core as mx

        from inference.engine.loop.runner import Runner

        self._wrap(mx, "eval", "mx.eval", by_caller=True)
        self._wrap(mx, "async_eval", "mx.async_eval")
        self._wrap(type(self.engine.loaded.model), "__call__", "model forward")
        self._wrap(Runner, "_postprocess", "postprocess")
        self._wrap(Runner, "step", "runner step")
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)

    def per_step_ms(self) -> dict[str, float]:
        steps = max(1, self.calls["runner step"])
        per_step = {k: round(v / steps * 1e3, 4) for k, v in self.seconds.items()}
        return per_step | {"steps": steps}


def profile(engine, batch: int, args, vocab: int) -> None:
    """cProfile of the runner's steps at `batch` rows, into DIR/profile_<label>.txt."""
    from bench.gpu import collect, prompts, steps_profiled

    profiler = cProfile.Profile()
    with steps_profiled(engine.runner, profiler):
        collect(engine, requests(prompts(batch, PROMPT, vocab, 15), args.tokens))
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)
    (args.out / f"profile_{args.label}.txt").write_text(text.getvalue())


def logprob_rows_cost(batch: int, vocab: int) -> dict[str, float]:
    """Host microseconds a step of queueing a (batch, vocab) argmax with and without its
    logprobs split into rows (mlx-lm's GenerationBatch does, every step)."""
    import mlx.core as mx

    logits = mx.random.normal((batch, vocab)).astype(mx.bfloat16)
    mx.eval(logits)

    def run(split: bool) -> float:
        started = time.perf_counter()
        for _ in range(200):
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            rows = list(logprobs) if split else []
            mx.async_eval(mx.argmax(logprobs, axis=-1), rows)
            mx.eval(rows)
        mx.synchronize()
        return (time.perf_counter() - started) / 200 * 1e6

    run(True), run(False)  # warm
    return {"with_rows": round(min(run(True) for _ in range(3)), 1),
            "without": round(min(run(False) for _ in range(3)), 1)}  # fmt: skip


if __name__ == "__main__":
    main()
