"""A 10-turn tool-using conversation's prompt-cache hits, with the generated-token history
(prompting/token_history.py) and without it.

    .venv/bin/python bench/token_history.py [--turns 10] [--temperatures 0.8,1.5]

The default model in-process: each turn's reply is sampled (so it may be spelled in
tokens BPE would merge), sent back as text in the next turn with a tool's result, as an
agent loop does. "without": prompts tokenized afresh; "with": each earlier reply keeps
the ids the model generated. Per temperature and run: prompt tokens, cached tokens and
their share over turns 2 on (turn 1 has nothing cached). Writes var/bench/token_history.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inference.engine.process.startup import prepare_mlx_process  # noqa: E402

prepare_mlx_process()  # OpenBLAS under MLX before mlx.core is imported

from inference.engine import Engine, EngineConfig, load_model  # noqa: E402
from inference.engine.prompting.prompt import PromptBuilder  # noqa: E402
from inference.protocol.sampling import SamplingParams  # noqa: E402
from inference.protocol.wire import ChatInput, GenerateCall  # noqa: E402
from tests.engine.helpers import generate  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Today's weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}  # fmt: skip
CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Perth", "Quito", "Hanoi", "Dakar", "Riga", "Bern"]


def conversation(
    engine: Engine, builder: PromptBuilder, scope: str, temperature: float, args
) -> list[dict]:
    messages = [{"role": "system", "content": "You are a travel assistant. Use the tools."}]
    turns = []
    for turn, city in enumerate(CITIES[: args.turns]):
        messages.append({"role": "user", "content": f"What should I pack for {city}?"})
        call = GenerateCall(
            chat=ChatInput(messages=list(messages), tools=[WEATHER]), max_tokens=args.tokens,
            cache_scope=scope,
            sampling=SamplingParams(temperature=temperature, seed=turn),
        )  # fmt: skip
        run = generate(engine, builder.build(call).request)
        turns.append({"prompt": run.end.prompt_tokens, "cached": run.end.cached_tokens})
        messages.append({"role": "assistant", "content": run.text})
        messages.append({"role": "tool", "content": json.dumps({"city": city, "sky": "rain"})})
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--temperatures", default="0.8,1.5")
    args = parser.parse_args()
    folder = ROOT / "var" / "models" / "smollm2-135m-instruct"
    engine = Engine(lambda: load_model(folder), config=EngineConfig(max_batch_size=4)).start()
    results = {}
    try:
        for temperature in map(float, args.temperatures.split(",")):
            for name, history in (("without", None), ("with", engine.runner.history)):
                # None: the builder's own history, which no generation records into
                builder = PromptBuilder(engine.loaded, history=history)
                scope = f"bench-{name}-{temperature}"
                turns = conversation(engine, builder, scope, temperature, args)
                later = turns[1:]
                share = sum(t["cached"] for t in later) / sum(t["prompt"] for t in later)
                results[f"{name} at {temperature}"] = {
                    "turns": turns, "cached_share_after_turn_1": round(share, 3)}  # fmt: skip
                print(f"temperature {temperature}, {name:>7} history: cached {share:.1%} of "
                      f"prompt tokens over turns 2-{args.turns}")  # fmt: skip
    finally:
        engine.shutdown()
    out = ROOT / "var" / "bench" / "token_history.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
