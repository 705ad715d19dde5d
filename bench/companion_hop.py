"""What a draft model in a companion worker costs per drafted step against the same draft
model inline (issue 50 item 5).

    .venv/bin/python bench/companion_hop.py [--draft FOLDER] [--steps 40] [--k 3]

One row, drafted the way the verify loop drafts it: each step proposes `k` tokens after
the row's history, then the history grows by those tokens and one more (every draft kept:
the cheapest catch-up, so the hop's share is at its largest). (a) inline: ModelDrafter in
this process; (b) companion: CompanionDrafter asking process/companion.py, started here
as the supervisor starts it (`manage.py modelworker --companion`). Both must propose the
same tokens. Reported: the first step (the prompt's prefill) and the median of the rest,
their difference, and the round trip of a question the companion answers without
computing (what the hop alone costs).
"""

# ruff: noqa: E402  (the process is prepared before mlx.core is imported)
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inference.engine.process.startup import prepare_mlx_process

prepare_mlx_process()

from mlx_lm.utils import load_tokenizer

from inference.engine.acceleration.loader import load_model
from inference.engine.drafts.companion import CompanionDrafter, CompanionLinks
from inference.engine.drafts.draft_model import ModelDrafter

MODELS = Path(os.environ.get("MLXLAB_MODELS_DIR", ROOT / "var" / "models"))
PROMPT = "List the numbers from one to twenty in words, one per line, then count back down."


def run(drafter, prompt: list[int], steps: int, k: int) -> tuple[list[float], list[int]]:
    """Seconds per propose, and every token proposed."""
    history, seconds, proposed = list(prompt), [], []
    for _ in range(steps):
        started = time.perf_counter()
        tokens = drafter.propose(history, k)
        seconds.append(time.perf_counter() - started)
        proposed.extend(tokens)
        history.extend([*tokens, tokens[-1] if tokens else 0])
    return seconds, proposed


def round_trip(address: str, count: int = 200) -> float:
    """The median milliseconds of a question the companion answers without computing (its
    report): what the hop itself costs, apart from drafting."""
    import zmq

    from inference.protocol import wire

    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.connect(address)
    seconds = []
    for request_id in range(count):
        started = time.perf_counter()
        socket.send(wire.encode("report", request_id))
        wire.decode(socket.recv())
        seconds.append(time.perf_counter() - started)
    socket.close(0)
    context.term()
    return round(statistics.median(seconds) * 1000, 3)


def start_companion(folder: Path, address: str) -> subprocess.Popen:
    argv = [sys.executable, str(ROOT / "manage.py"), "modelworker", "--model", "draft"]
    argv += ["--path", str(folder), "--listen", address, "--exit-with-parent", "--companion"]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mlxlab.settings"}
    return subprocess.Popen(argv, env=env)


def figures(rounds: list[list[float]]) -> dict:
    """The first step (a prefill) and the later ones, over every round, in milliseconds."""
    later = [seconds for run in rounds for seconds in run[1:]]
    return {
        "first_ms": round(statistics.median(run[0] for run in rounds) * 1000, 2),
        "median_ms": round(statistics.median(later) * 1000, 3),
        "mean_ms": round(statistics.fmean(later) * 1000, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draft", type=Path, default=MODELS / "smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="inline and companion in turn")
    args = parser.parse_args()
    prompt = load_tokenizer(args.draft).encode(PROMPT)
    model = load_model(args.draft).model
    inline, remote = [], []
    with tempfile.TemporaryDirectory() as scratch:
        address = f"ipc://{scratch}/companion.sock"
        process = start_companion(args.draft, address)
        try:
            links = CompanionLinks()
            warm = CompanionDrafter(links, address, args.k)
            while not warm.propose(prompt, 1):  # until it has loaded and answers
                assert process.poll() is None, "the companion did not start"
                warm.off = False
                time.sleep(0.5)
            for _ in range(args.rounds):  # in turn: a neighbour's load falls on both
                ours = run(ModelDrafter(model, args.k), prompt, args.steps, args.k)
                theirs = run(CompanionDrafter(links, address, args.k), prompt, args.steps, args.k)
                assert theirs[1] == ours[1], "the companion proposed other tokens than inline"
                inline.append(ours[0])
                remote.append(theirs[0])
            hop = round_trip(address)
        finally:
            process.terminate()
            process.wait(10)
    inline_f, remote_f = figures(inline), figures(remote)
    report = {
        "draft": args.draft.name, "k": args.k, "steps": args.steps, "rounds": args.rounds,
        "prompt_tokens": len(prompt), "inline": inline_f, "companion": remote_f,
        "companion_minus_inline_ms": round(remote_f["median_ms"] - inline_f["median_ms"], 3),
        "round_trip_ms": hop,
    }  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
