"""What the engine's decode step costs the host per row, on any machine.

    .venv/bin/python bench/host_step.py                       # batch 1 and 32, tiny model
    .venv/bin/python bench/host_step.py --profile 32 --top 30 # cProfile of the engine thread

A random-weight model with nearly no compute (bench/gpu_models.py's `tiny-bf16`: 2
layers, hidden 64, the default model's tokenizer, float32 on the CPU, its vocabulary cut
to 2,048 tokens) makes a step's time almost all host work, so the same Python that runs per step on a GPU shows
here: mlx-lm's BatchGenerator alone against the engine over it, greedy, 32-token prompts,
best of `--repeats`. The difference per row per step is what the engine adds.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if "--root" in sys.argv:  # another tree's engine (its `inference/`), for before and after
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--root") + 1]).resolve()))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before mlx.core: the CPU's BLAS
from bench.gpu import collect, prompts, steps_profiled  # noqa: E402
from bench.gpu_models import TINY, Shape, build_folder  # noqa: E402

TOKENIZER = ROOT / "var" / "models" / "smollm2-135m-instruct"
# The tiny shape with a 2,048-token vocabulary: the CPU's softmax over 49,152 logits a row
# would take most of a step here (about 25 ms at 32 rows), hiding the host's share.
LOGPROBS = [0]  # top-N logprobs each engine row asks for (--logprobs)
HOST_TINY = Shape("tiny-v2k", TINY.hidden, TINY.intermediate, TINY.layers, 4, 2, vocab=2048)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=int, help="profile the engine thread at this batch")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--root", help="import the engine from this tree (default: this one)")
    parser.add_argument("--logprobs", type=int, default=0, help="rows asking for top-N logprobs")
    args = parser.parse_args()
    LOGPROBS[0] = args.logprobs
    folder = build_folder(HOST_TINY, Path(tempfile.mkdtemp()) / HOST_TINY.name, TOKENIZER)
    engine = started(folder, max(int(b) for b in args.batches.split(",")))
    try:
        if args.profile:
            profile(engine, args.profile, args.tokens, args.top)
            return
        for batch in (int(b) for b in args.batches.split(",")):
            bare = best(lambda b=batch: generator_step(engine, b, args.tokens), args.repeats)
            ours = best(lambda b=batch: engine_step(engine, b, args.tokens), args.repeats)
            print(
                f"batch {batch:>3}: BatchGenerator {bare * 1e3:7.3f} ms/step, "
                f"engine {ours * 1e3:7.3f} ms/step, "
                f"engine adds {(ours - bare) / batch * 1e6:6.1f} us/row/step",
                flush=True,
            )
    finally:
        engine.shutdown()


def started(folder: Path, max_batch: int):
    import mlx.core as mx

    from inference.engine import Engine, EngineConfig, load_model

    def loaded():
        model = load_model(folder)
        if not mx.metal.is_available() and not mx.cuda.is_available():
            model.model.set_dtype(mx.float32)  # MLX's CPU has no fast bf16 matmul
        # Tied embeddings: a zero row scores 0 against random ones' max, so greedy rows
        # never end early on an end-of-sequence token.
        embedding = model.model.model.embed_tokens.weight
        embedding[mx.array(sorted(model.tokenizer.eos_token_ids))] = 0
        mx.eval(model.model.parameters())
        return model

    config = EngineConfig(max_batch_size=max_batch, prefill_batch_size=max_batch, warm_up=False)
    return Engine(loaded, config=config).start()


def best(run, repeats: int) -> float:
    run()  # the first pass warms up
    return min(run() for _ in range(repeats))


def engine_step(engine, batch: int, tokens: int) -> float:
    """Seconds per decode step of the engine: from the first token to the last.

    The rows prefill together (prefill_batch_size is the batch), so the earliest first
    token starts the decode; a row whose text is held back (random tokens can be
    incomplete UTF-8) stamps late, so no per-row first stamp is used."""
    from inference.engine import GenerationRequest

    options = {"logprobs": True, "top_logprobs": LOGPROBS[0]} if LOGPROBS[0] else {}
    requests = [
        GenerationRequest(p, max_tokens=tokens, **options)
        for p in prompts(batch, 32, HOST_TINY.vocab)
    ]
    stamps = collect(engine, requests)
    first, last = min(row[0] for row in stamps), max(row[-1] for row in stamps)
    return (last - first) / (tokens - 1)


def generator_step(engine, batch: int, tokens: int) -> float:
    """The same through mlx-lm's BatchGenerator alone, on the engine's model (its thread
    is idle between requests; MLX arrays are shared between threads here)."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    generator = BatchGenerator(
        engine.loaded.model, completion_batch_size=batch, prefill_batch_size=batch
    )
    uids = set(generator.insert(prompts(batch, 32, HOST_TINY.vocab), [tokens] * batch))
    first = None
    with mx.stream(generator.stream):
        while uids:
            responses = generator.next_generated()
            if first is None:
                first = time.perf_counter()
            for response in responses:
                if response.finish_reason is not None:
                    uids.discard(response.uid)
    elapsed = time.perf_counter() - first
    generator.close()
    return elapsed / (tokens - 1)


def profile(engine, batch: int, tokens: int, top: int) -> None:
    """cProfile of the runner's steps only (the engine thread), sorted by own time."""
    profiler = cProfile.Profile()
    engine_step(engine, batch, tokens)  # warm
    with steps_profiled(engine.runner, profiler):
        seconds = engine_step(engine, batch, tokens)
    print(f"batch {batch}: {seconds * 1e3:.3f} ms/step under the profiler")
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(text.getvalue())


if __name__ == "__main__":
    main()
