"""Decode speed with speculative decoding against the same request without it (MLX Lab only).

Two tasks, each sent greedy and streaming, with and without drafts, turn about:
- rewrite: a ~300-token Python class, a method to rename, with the right `prediction` (the
  code with the rename applied, as a client predicting an edit would send it);
- copy: a ~300-token paragraph to repeat word for word, with prompt lookup
  (`draft_model: "ngram"`), drafts looked up in the prompt.
- draft model: the rewrite's request without `prediction`, drafted by a lab-made quantized
  copy of the default model (bench/draft_model.py: nothing smaller shares its vocabulary
  here), `num_draft_tokens` 3 (mlx_lm.server's default).
Targets: rewrite >= 2.5x, copy >= 1.8x the decode tokens/s without drafts; the
draft-model row has none (its copy costs a target's step a token). The
usage's accepted/rejected prediction tokens say how much of the reply came drafted; the
replies are compared, as they must be equal.
"""

from __future__ import annotations

import statistics

from draft_model import DRAFT_NAME
from openai import AsyncOpenAI
from workload import stream_chat

CODE = '''class Inventory:
    """A small store of items and their counts."""

    def __init__(self):
        self.items = {}

    def add(self, name, count=1):
        """Add count items called name."""
        if count < 1:
            raise ValueError("count must be at least 1")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count=1):
        """Remove count items called name, if there are enough."""
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError("not enough " + name)
        if count == have:
            del self.items[name]
        else:
            self.items[name] = have - count

    def total(self):
        """How many items there are in all."""
        return sum(self.items.values())

    def report(self):
        """One line per item, sorted by name."""
        lines = []
        for name in sorted(self.items):
            lines.append(name + ": " + str(self.items[name]))
        return "\\n".join(lines)
'''
REWRITE = (
    "Rename the method total to count_all in this Python code. Output the whole code.\n\n"
    f"```python\n{CODE}```"
)
PREDICTION = "```python\n" + CODE.replace("def total", "def count_all") + "```"
TEXT = (
    "The lighthouse stood on a rock at the edge of the bay. Every night the keeper climbed "
    "the ninety-two steps to light the lamp, and every morning he climbed them again to put "
    "it out. Ships passed safely through the narrow channel, and the fishermen of the village "
    "said that no light on the whole coast burned as steadily as his. In winter the storms "
    "came from the north, and the waves broke over the rock so high that spray reached the "
    "windows of the lamp room. The keeper kept a log of every ship that passed, its name, "
    "its flag and the hour, and on quiet evenings he read the old logs of the keepers "
    "before him. One of them had written that the sea was never the same twice, and that "
    "a keeper who forgot it would not keep the light for long. He remembered those words "
    "on the night the great storm came, when the lamp flickered and the rock shook, and he "
    "stayed on the stairs until morning with his hand on the rail and his eyes on the flame."
)
COPY = f"Repeat the following text exactly, word for word:\n\n{TEXT}"
TASKS = {
    "rewrite": (REWRITE, {"prediction": {"type": "content", "content": PREDICTION}}, 2.5),
    "copy": (COPY, {"draft_model": "ngram"}, 1.8),
    "draft model": (REWRITE, {"draft_model": DRAFT_NAME}, None),
}


async def speculative_decode(client: AsyncOpenAI, model: str, repeats: int = 2) -> dict:
    results = {}
    for name, (prompt, drafting, target) in TASKS.items():
        plain, drafted = [], []
        await stream_chat(client, model, prompt, 8)  # the prompt cached, as for both below
        for turn in range(repeats):
            order = [False, True] if turn % 2 == 0 else [True, False]
            for with_drafts in order:
                extra = {"extra_body": drafting} if with_drafts else {}
                run = await stream_chat(client, model, prompt, 400, **extra)
                (drafted if with_drafts else plain).append(run)
        plain_tps = statistics.median(r.decode_tps for r in plain if r.decode_tps)
        drafted_tps = statistics.median(r.decode_tps for r in drafted if r.decode_tps)
        replies = {r.completion_tokens for r in plain + drafted}
        results[name] = {
            "plain_decode_tps": plain_tps,
            "drafted_decode_tps": drafted_tps,
            "speedup": drafted_tps / plain_tps,
            "target": target,
            "completion_tokens": sorted(replies),
            "accepted_prediction_tokens": [r.accepted for r in drafted],
            "rejected_prediction_tokens": [r.rejected for r in drafted],
        }
    return results


def speculative_lines(results: dict | None) -> list[str]:
    if not results:
        return ["speculative decoding: not measured"]
    lines = []
    for name, figures in results.items():
        tokens = figures["completion_tokens"]
        lines.append(
            f"speculative decoding, {name} (MLX Lab): {figures['drafted_decode_tps']:.2f} "
            f"tokens/s with drafts vs {figures['plain_decode_tps']:.2f} without = "
            f"{figures['speedup']:.2f}x "
            f"({f'target >= {target}x' if (target := figures['target']) else 'no target'}); "
            f"{tokens} tokens, drafts kept {figures['accepted_prediction_tokens']}, "
            f"refused {figures['rejected_prediction_tokens']}"
        )
    if any(f["target"] and f["speedup"] < f["target"] for f in results.values()):
        lines.append(
            "below a target: a verifying pass costs more than a step for each position it "
            "adds (the kernel's arithmetic grows with the rows); bench/verify_cost.py, below, "
            "measures it by width"
        )
    return lines
