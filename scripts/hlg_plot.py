"""Draw HLG's tone curve and its effect on one real next-token distribution, as docs/hlg.svg.

    .venv/bin/python scripts/hlg_plot.py [--model var/models/smollm2-135m-instruct]
        [--prompt "..."] [--out docs/hlg.svg]

Left: the curve D(d) at the default knobs (inference/engine/loop/hlg.py), against d.
Right: the model's next-token probabilities after a chat prompt, by rank on log-log axes,
with HLG off and on (temperature 1). It prints a Markdown table of the figures docs/API.md
quotes. The SVG is written by hand: the lab does not depend on matplotlib.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import mlx.core as mx  # noqa: E402
from mlx_lm import load  # noqa: E402

from inference.engine.loop.hlg import knobs, tone_curve  # noqa: E402
from inference.protocol.sampling import HlgParams  # noqa: E402

PROMPT = "Write a one-line poem about the sea."
PANEL_W, PANEL_H, MARGIN = 420, 300, 56
OFF, ON = "#5b6b7f", "#d9730d"


def next_token_logits(folder: Path, prompt: str):
    """(logits (1, vocabulary) float32, tokenizer) after the chat-templated prompt."""
    model, tokenizer = load(str(folder))
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True
    )
    return model(mx.array([ids]))[:, -1, :].astype(mx.float32), tokenizer


def figures(logits: mx.array, original: mx.array) -> dict:
    """Top-1 share, the top ten's, entropy, and the mass of the tokens whose `original`
    logit was within 4 of the top, and 14 or more below it."""
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    probs = mx.exp(logprobs)[0]
    ranked = mx.sort(probs)[::-1]
    distance = (original.max() - original)[0]
    return {
        "top-1 probability": ranked[0].item(),
        "top-10 probability": ranked[:10].sum().item(),
        "entropy (nats)": -(probs * logprobs[0]).sum().item(),
        "mass within 4 of the top": (probs * (distance <= 4)).sum().item(),
        "mass 14 or more below the top": (probs * (distance >= 14)).sum().item(),
    }


def rank_curve(logits: mx.array, points: int = 240) -> list[tuple[float, float]]:
    """(rank, probability) at log-spaced ranks, for a log-log line."""
    probs = mx.sort(mx.softmax(logits, axis=-1)[0])[::-1].tolist()
    ranks = sorted(
        {int(round(math.exp(i * math.log(len(probs)) / points))) for i in range(points + 1)}
    )
    return [(rank, probs[rank - 1]) for rank in ranks]


# -- SVG ------------------------------------------------------------------------------------


class Panel:
    """A plot area at (x0, y0) mapping data ranges onto its pixels (linear or log10)."""

    def __init__(self, x0: float, xs: tuple, ys: tuple, *, log: bool = False) -> None:
        self.x0, self.xs, self.ys, self.log = x0, xs, ys, log

    def _scale(self, v: float, lo: float, hi: float) -> float:
        if self.log:
            v, lo, hi = math.log10(max(v, 1e-300)), math.log10(lo), math.log10(hi)
        return (v - lo) / (hi - lo)

    def point(self, x: float, y: float) -> tuple[float, float]:
        px = self.x0 + MARGIN + self._scale(x, *self.xs) * (PANEL_W - MARGIN - 12)
        fraction = min(max(self._scale(y, *self.ys), -0.02), 1.02)
        return px, MARGIN / 2 + (1 - fraction) * (PANEL_H - MARGIN)

    def line(self, data, colour: str, *, dash: str = "", width: float = 2) -> str:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (self.point(a, b) for a, b in data))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<polyline fill="none" stroke="{colour}" stroke-width="{width}"{dashed} points="{path}"/>'

    def frame(self, xticks, yticks, xlabel: str, ylabel: str, title: str) -> list[str]:
        (left, bottom), (right, top) = (
            self.point(self.xs[0], self.ys[0]),
            self.point(self.xs[1], self.ys[1]),
        )
        out = [
            f'<rect x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" height="{bottom - top:.1f}" fill="none" stroke="#999"/>'
        ]
        for value, label in xticks:
            x, _ = self.point(value, self.ys[0])
            out.append(_text(x, bottom + 16, label, anchor="middle"))
        for value, label in yticks:
            _, y = self.point(self.xs[0], value)
            out.append(_text(left - 6, y + 4, label, anchor="end"))
        out.append(_text((left + right) / 2, bottom + 34, xlabel, anchor="middle"))
        out.append(_text(left - 44, (top + bottom) / 2, ylabel, anchor="middle", rotate=True))
        out.append(_text((left + right) / 2, top - 8, title, anchor="middle", weight="bold"))
        return out


def _text(x: float, y: float, text: str, *, anchor="start", rotate=False, weight="normal") -> str:
    turn = f' transform="rotate(-90 {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-weight="{weight}"{turn}>'
            f"{text}</text>")  # fmt: skip


def curve_panel(params: HlgParams) -> list[str]:
    """D(d) against d, the identity dashed, the band shaded, each part named."""
    panel = Panel(0, (0, 30), (0, 30))
    ds = [i / 10 for i in range(301)]
    top = mx.zeros((1, len(ds)))
    shaped = tone_curve(top - mx.array([ds]), knobs([params]))[0].tolist()
    upper, lower = params.pivot_offset - params.width / 2, params.pivot_offset + params.width / 2
    (x1, y1), (x2, y2) = panel.point(upper, 30), panel.point(lower, 0)
    out = [
        f'<rect x="{x1:.1f}" y="{y1:.1f}" width="{x2 - x1:.1f}" height="{y2 - y1:.1f}" fill="#eef3f8"/>'
    ]
    out.append(panel.line([(0, 0), (30, 30)], "#999", dash="4 4", width=1))
    out.append(panel.line([(params.pivot_offset, 0), (params.pivot_offset, 30)], "#9ab", width=1))
    out.append(_text(panel.point(params.pivot_offset, 0)[0] + 3, panel.point(0, 1)[1], "pivot"))
    out.append(panel.line(list(zip(ds, (-v for v in shaped), strict=True)), ON))
    for d, name in ((upper / 2, "shoulder"), (params.pivot_offset, "band"), (lower + 8, "toe")):
        x, _ = panel.point(d, 0)
        out.append(_text(x, panel.point(0, 28)[1], name, anchor="middle"))
    ticks = [(v, str(v)) for v in (0, 5, 10, 15, 20, 25, 30)]
    out += panel.frame(
        ticks, ticks, "d: distance below the top logit", "D(d)", "The curve, default knobs"
    )
    return out


def rank_panel(off: list, on: list, vocabulary: int) -> list[str]:
    """Probability by rank, log-log, HLG off and on."""
    panel = Panel(PANEL_W + 20, (1, vocabulary), (1e-12, 1), log=True)
    out = [panel.line(off, OFF), panel.line(on, ON)]
    xticks = [(10**k, f"10^{k}") for k in range(5) if 10**k <= vocabulary]
    yticks = [(10.0**-k, f"10^-{k}" if k else "1") for k in (0, 3, 6, 9, 12)]
    out += panel.frame(
        xticks, yticks, "rank of the token", "probability", "Next-token distribution"
    )
    for i, (colour, label) in enumerate(((OFF, "HLG off"), (ON, "HLG on (4/4/6/6)"))):
        x, y = panel.point(1.6, 10.0 ** (-9.5 - i * 0.9))
        out.append(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="14" height="4" fill="{colour}"/>')
        out.append(_text(x + 20, y - 3, label))
    return out


def svg(parts: list[str], caption: str) -> str:
    width, height = 2 * PANEL_W + 20, PANEL_H + 36
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">')  # fmt: skip
    body = "\n".join([f'<rect width="{width}" height="{height}" fill="white"/>', *parts])
    return f"{head}\n{body}\n{_text(12, height - 6, caption)}\n</svg>\n"


def table(off: dict, on: dict) -> str:
    rows = ["| | HLG off | HLG on |", "|---|---:|---:|"]
    rows += [f"| {name} | {off[name]:.4g} | {on[name]:.4g} |" for name in off]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "var/models/smollm2-135m-instruct")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/hlg.svg")
    args = parser.parse_args()
    params = HlgParams()
    logits, tokenizer = next_token_logits(args.model, args.prompt)
    shaped = tone_curve(logits, knobs([params]))
    caption = f"{args.model.name}, next token after the chat prompt \u201c{args.prompt}\u201d"
    parts = curve_panel(params) + rank_panel(
        rank_curve(logits), rank_curve(shaped), logits.shape[-1]
    )
    args.out.write_text(svg(parts, caption))
    print(table(figures(logits, logits), figures(shaped, logits)))
    top = mx.argsort(-logits[0])[:5].tolist()
    p_off, p_on = mx.softmax(logits, axis=-1)[0], mx.softmax(shaped, axis=-1)[0]
    print("\n| token | off | on |\n|---|---:|---:|")
    for token in top:
        print(
            f"| `{tokenizer.decode([token])!r}` | {p_off[token].item():.3f} | {p_on[token].item():.3f} |"
        )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
