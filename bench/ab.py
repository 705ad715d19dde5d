"""MLX Lab at another commit against this checkout, on `make bench`'s workload, taking turns.

    .venv/bin/python bench/ab.py --baseline 456d3f6            # 3 rounds
    .venv/bin/python bench/ab.py --baseline 456d3f6 --rounds 5 --quick

The baseline is checked out once under var/ab/<commit> (a git worktree), with this
checkout's native builds copied in (the same mlx: its libraries load there as here; the
sources must match, which the script checks). Both sides run on this checkout's venv and
models. Each round measures one side, then the other (the first side alternates), each
server alone on the CPU: one stream, 8 streams, the two-turn chat's prefill, the
JSON-schema row and the speculative rows (bench/run.py's `measure`). Prints each figure's
median and range per side and the ratio of medians; writes var/bench/ab-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import DEFAULT, OUT_DIR, QUICK, bench_server  # noqa: E402
from servers import ROOT, mlxlab_spec  # noqa: E402

NATIVE = ("quantized_matmul", "cuda_decode")
# (label, how to read it from a result, higher is better)
FIGURES = [
    ("decode tokens/s, 1 stream", lambda r: r["decode_tps"], True),
    ("TTFT s, 1 stream", lambda r: r["ttft_s"], False),
    ("aggregate tokens/s, 8 streams", lambda r: r["aggregate_tps"], True),
    ("prefill tokens/s, chat prompt", lambda r: r["prefill_tps"], True),
    ("TTFT s, turn 2", lambda r: r["turn2_ttft_s"], False),
    ("JSON-schema decode tokens/s", lambda r: r["structured"]["constrained_decode_tps"], True),
    *[
        (
            f"speculative {name} tokens/s",
            lambda r, n=name: r["speculative"][n]["drafted_decode_tps"],
            True,
        )
        for name in ("rewrite", "copy", "draft model")
    ],
]


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def baseline_tree(commit: str) -> Path:
    """A checkout of `commit` with this checkout's native builds, made once."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    tree = ROOT / "var" / "ab" / sha[:12]
    if not tree.exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", str(tree), sha)
    for name in NATIVE:
        if git("diff", "--stat", sha, "HEAD", "--", f"native/{name}/src").strip():
            sys.exit(f"native/{name}'s sources differ at {sha[:12]}: build it there instead")
        built = ROOT / "native" / name / "build"
        if built.is_dir():
            shutil.copytree(built, tree / "native" / name / "build", dirs_exist_ok=True)
    return tree


def read(result: dict, figure) -> float | None:
    try:
        return figure(result)
    except (KeyError, TypeError):
        return None


def summary(results: dict[str, list[dict]]) -> list[str]:
    sides = list(results)
    lines = [f"| figure | {sides[0]} | {sides[1]} | {sides[1]} / {sides[0]} |", "|---|---|---|---|"]
    for label, figure, higher in FIGURES:
        cells, medians = [], []
        for side in sides:
            values = [v for r in results[side] if (v := read(r, figure)) is not None]
            if not values:
                cells.append("-")
                medians.append(None)
                continue
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:.3g} ({min(values):.3g}-{max(values):.3g})")
        ratio = f"{medians[1] / medians[0]:.2f}" if None not in medians and medians[0] else "-"
        lines.append(
            f"| {label}{'' if higher else ' (lower is better)'} | {' | '.join(cells)} | {ratio} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer tokens and repeats")
    args = parser.parse_args()
    config = QUICK if args.quick else DEFAULT
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    old = git("rev-parse", "--short", args.baseline).strip()
    new = git("rev-parse", "--short", "HEAD").strip() + (
        "+" if git("status", "--porcelain", "-uno") else ""
    )
    specs = {old: mlxlab_spec(baseline_tree(args.baseline), f"MLX Lab {old}"),
             new: mlxlab_spec(ROOT, f"MLX Lab {new}")}  # fmt: skip
    results: dict[str, list[dict]] = {side: [] for side in specs}
    order = list(specs)
    for round_ in range(args.rounds):
        for side in order if round_ % 2 == 0 else order[::-1]:
            print(f"== round {round_ + 1}/{args.rounds}: {side}", flush=True)
            results[side].append(bench_server(specs[side], config))
    text = "\n".join(summary(results))
    out = OUT_DIR / f"ab-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"baseline": old, "new": new, "config": vars(config),
                               "results": results}, indent=1) + "\n")  # fmt: skip
    print(f"\n{text}\n\nresults in {out.relative_to(ROOT)}")
    return 1 if any("error" in r for rs in results.values() for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
