"""Where a first token's time goes: the engine's calls from a request's submit to its first
token's event, and mlx-lm's `generate_step` beside it, each call's start and length.

    python3 bench/first_token_timeline.py                          # the default model
    python3 bench/first_token_timeline.py --shape llama-1b-bf16 --tokenizer DIR --lengths 512,8

In-process, on CPU or GPU, the prompt cache off as in bench/first_token.py (or on). The calls are
wrapped where they are defined (the runner's, mlx-lm's prompt and generation batches', the
model's, `mx.eval`); a model call's length is the host's work to build its graph, an
`mx.eval`'s the wait for the device. Prints the last of `--runs` requests a length, nested.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # before anything imports mlx.core: the BLAS goes under MLX

from first_token import generate_step_ttft, model_options, started  # noqa: E402
from gpu import engine_stream, prompts  # noqa: E402

SPANS: list[tuple[str, float, float]] = []  # (call, started, ended), every thread


def wrap(owner, name: str, label: str | None = None) -> None:
    """Record each call of `owner.name` (a class's own method, or a module's function)."""
    original = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            SPANS.append((label, started, time.perf_counter()))

    setattr(owner, name, timed)


def instrument(model) -> None:
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator, GenerationBatch, PromptProcessingBatch

    from inference.engine.caching.prompt_cache import PromptCache
    from inference.engine.loop.first_token import FirstTokenSooner, HandsOutFirstTokens
    from inference.engine.loop.runner import Runner
    from inference.engine.loop.scheduler import Scheduler

    for owner, names in [
        (Scheduler, ["schedule"]),
        (Runner, ["apply", "step", "_postprocess", "_insert"]),
        (PromptCache, ["lookup"]),
        (FirstTokenSooner, ["_next", "_join_prefilled"]),
        (BatchGenerator, ["_next", "_make_batch", "insert"]),
        (PromptProcessingBatch, ["prompt", "split", "generate", "extend"]),
        (GenerationBatch, ["__init__", "extend", "_step"]),
        (HandsOutFirstTokens, ["_hand_out", "extend"]),
        (type(model), ["__call__"]),
        (mx, ["eval", "async_eval", "clear_cache"]),
    ]:
        for name in names:
            if name in vars(owner) or owner is mx:
                wrap(owner, name)


def print_timeline(title: str, started: float, ended: float) -> None:
    """The spans inside [started, ended], nested by containment, in ms from `started`."""
    spans = sorted(
        (s for s in SPANS if s[1] >= started and s[2] <= ended + 0.05),
        key=lambda s: (s[1], -s[2]),
    )
    print(f"\n{title}: {1000 * (ended - started):.2f} ms to the first token")
    open_ends: list[float] = []
    for label, begin, end in spans:
        while open_ends and begin >= open_ends[-1]:
            open_ends.pop()
        print(f"  {1000 * (begin - started):8.2f} {1000 * (end - begin):7.2f}  "
              f"{'  ' * len(open_ends)}{label}")  # fmt: skip
        open_ends.append(end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    model_options(parser)
    parser.add_argument("--lengths", default="8,512")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--prompt-cache", action="store_true", help="the engine's, on")
    args = parser.parse_args()
    engine = started(args, prompt_cache=args.prompt_cache)
    model = engine.loaded.model
    instrument(model)
    try:
        for length in map(int, args.lengths.split(",")):
            for prompt in prompts(args.runs, length, engine.vocab_size, seed=length):
                SPANS.clear()
                submitted = time.perf_counter()
                ttft = engine_stream(engine, prompt, 1)[1]
            print_timeline(f"engine, {length}-token prompt", submitted, submitted + ttft)
            time.sleep(0.05)  # the engine's thread back to waiting
            for prompt in prompts(args.runs, length, engine.vocab_size, seed=length):
                SPANS.clear()
                submitted = time.perf_counter()
                ttft = generate_step_ttft(model, prompt)
            print_timeline(f"generate_step, {length}-token prompt", submitted, submitted + ttft)
    finally:
        engine.shutdown()
    print(f"threads alive: {threading.active_count()}")


if __name__ == "__main__":
    main()
