"""Time per tool call in an agent loop, with token fast-forwarding (MLXLAB_FILL) off,
strict and echo.

    .venv/bin/python bench/tool_fill.py [--turns 10] [--rounds 3]

The default model in-process, greedy, one request at a time: a few-shot weather agent
(tests/tool_agent.py) asked about a city per turn, each call's result sent back as the
next turn's tool message, as an agent loop does. The modes take turns round by round, so
that a slow moment of the machine falls on each alike. Per mode: the median time per call
(prefill included, the prompt cache warm from the turn before), completion tokens per
call, the share of them filled, and whether every call equals the unfilled one. Writes
var/bench/tool_fill.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # OpenBLAS under MLX before mlx.core is imported

from inference.engine import Engine, EngineConfig, load_model  # noqa: E402
from inference.engine.prompting.prompt import PromptBuilder, PromptLimits  # noqa: E402
from inference.protocol.sampling import SamplingParams  # noqa: E402
from inference.protocol.wire import ChatInput, GenerateCall  # noqa: E402
from tests.engine.helpers import generate  # noqa: E402
from tests.tool_agent import TIME, WEATHER, agent  # noqa: E402

MODES = ("off", "strict", "echo")
CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Perth", "Quito", "Hanoi", "Dakar", "Riga", "Bern"]


def loop(engine: Engine, builder: PromptBuilder, scope: str, turns: int) -> list[dict]:
    """One agent loop; per turn its call, time and tokens."""
    messages = agent(CITIES[0])[:-1]
    calls = []
    for city in CITIES[:turns]:
        messages.append({"role": "user", "content": f"What's the weather in {city}?"})
        chat = ChatInput(
            messages=list(messages), tools=[WEATHER, TIME], tool_names=["get_weather", "get_time"],
            tool_choice="auto",
        )  # fmt: skip
        call = GenerateCall(
            chat=chat, max_tokens=64, sampling=SamplingParams(temperature=0.0), cache_scope=scope
        )
        started = time.perf_counter()
        run = generate(engine, builder.build(call).request)
        seconds = time.perf_counter() - started
        made = [(each.name, each.arguments) for each in run.calls]
        calls.append({
            "call": made, "seconds": seconds, "tokens": run.end.completion_tokens,
            "filled": run.end.fill.filled_tokens if run.end.fill else 0,
        })  # fmt: skip
        text = "".join(
            f'<tool_call>{{"name": "{n}", "arguments": {a}}}</tool_call>' for n, a in made
        )
        messages.append({"role": "assistant", "content": text or run.text})
        messages.append({"role": "tool", "content": json.dumps({"city": city, "sky": "rain"})})
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = ROOT / "var" / "models" / "smollm2-135m-instruct"
    engine = Engine(lambda: load_model(folder), config=EngineConfig(max_batch_size=4)).start()
    runs: dict[str, list[list[dict]]] = {mode: [] for mode in MODES}
    try:
        builders = {
            mode: PromptBuilder(engine.loaded, limits=PromptLimits(fill=mode)) for mode in MODES
        }
        loop(engine, builders["off"], "warm-up", 2)
        for round_ in range(args.rounds):
            for mode in MODES:
                runs[mode].append(loop(engine, builders[mode], f"{mode}-{round_}", args.turns))
    finally:
        engine.shutdown()
    reference = [turn["call"] for turn in runs["off"][0]]
    results = {}
    for mode in MODES:
        turns = [turn for each in runs[mode] for turn in each]
        called = [turn for turn in turns if turn["call"]]
        results[mode] = {
            "calls": len(called),
            "median_seconds_per_call": statistics.median(t["seconds"] for t in called),
            "tokens_per_call": statistics.mean(t["tokens"] for t in called),
            "filled_share": sum(t["filled"] for t in called) / sum(t["tokens"] for t in called),
            "same_calls_as_off": all([t["call"] for t in each] == reference for each in runs[mode]),
        }
        row = results[mode]
        print(f"fill {mode:>6}: {row['calls']} calls, {row['median_seconds_per_call'] * 1000:.0f} ms "
              f"a call (median), {row['tokens_per_call']:.1f} tokens a call, "
              f"{row['filled_share']:.0%} filled, same calls as off: {row['same_calls_as_off']}")  # fmt: skip
    out = ROOT / "var" / "bench" / "tool_fill.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
