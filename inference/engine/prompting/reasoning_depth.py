"""`reasoning_effort` on a chat template that reads a depth variable of its own.

Some templates read `reasoning_effort` (gpt-oss: low, medium, high; Qwen3.8: low,
medium, xhigh) and raise on a level they do not name. A request's level reaches such a
template as the nearest level it names, the deeper one on a tie, as mlx-bun maps them;
"none" only turns thinking off (the enable_thinking switch) and passes no depth.
"""

from __future__ import annotations

LEVELS = ("minimal", "low", "medium", "high", "xhigh")
VARIABLE = "reasoning_effort"


def template_levels(source) -> tuple[str, ...] | None:
    """The levels a template's source names, or None when it reads no depth variable."""
    if not isinstance(source, str) or VARIABLE not in source:
        return None
    return tuple(level for level in LEVELS if f'"{level}"' in source or f"'{level}'" in source)


def template_depth(effort: str | None, levels: tuple[str, ...] | None) -> str | None:
    """The value for the template's variable, or None to leave it unset."""
    if levels is None or effort is None or effort not in LEVELS:
        return None
    if not levels or effort in levels:  # names none: the template takes any level
        return effort
    rank = LEVELS.index(effort)
    return min(levels, key=lambda level: (abs(LEVELS.index(level) - rank), -LEVELS.index(level)))
