"""Where drafted tokens come from: prompt lookup, over the prompt, the text so far and an
optional prediction (OpenAI's Predicted Outputs). Plain Python, no MLX. (A draft model's
drafts come from draft_model.py.)

A drafter proposes the tokens it expects to follow a row's history; the verifying batch
(speculative.py) checks them all in one forward pass and tells the drafter how many the
model kept. Drafts never change what is generated, only how many tokens one step yields.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from ...protocol.sampling import MAX_DRAFT_TOKENS

# One extra verified position costs about this share of a decode step on the CPU this lab
# was measured on (SmolLM2-135M, 4-bit kernel path: 21 ms a step, about 4.5 ms a position
# more). Drafter.budget weighs it against the tokens a longer draft is expected to add.
POSITION_COST = 0.2
# Drafts per step when the request names no num_draft_tokens.
DEFAULT_DRAFT_TOKENS = 12


@dataclass(frozen=True)
class DraftPlan:
    """How a request drafts: `method` "ngram" (prompt lookup; `prediction` tokens, when
    given, are looked up first) or "model" (a draft model's greedy tokens; the model folder
    at `model_path`, run by its companion worker at `companion` when one is named, else
    inline), up to `num_draft_tokens` a step."""

    method: str = "ngram"
    num_draft_tokens: int | None = None  # None: DEFAULT_DRAFT_TOKENS, adapted to acceptance
    prediction: tuple[int, ...] = ()
    model_path: str = ""  # method "model": the draft model's folder
    companion: str = ""  # method "model": its companion worker's address; "": inline

    def __post_init__(self) -> None:
        if self.method not in ("ngram", "model"):
            raise ValueError(f"unknown draft method {self.method!r}")
        if (self.method == "model") != bool(self.model_path):
            raise ValueError("a draft model's plan names its folder, and only it")
        if self.num_draft_tokens is not None and not 1 <= self.num_draft_tokens <= (
            MAX_DRAFT_TOKENS
        ):
            raise ValueError(f"num_draft_tokens must be between 1 and {MAX_DRAFT_TOKENS}")


class NgramIndex:
    """Where each n-gram (n in [low, high]) of a token list ends, for lookups.

    `extend` indexes the n-grams ending at new positions; a list only ever grows.
    """

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high
        self.ends: dict[tuple[int, ...], list[int]] = {}
        self.indexed = 0  # n-grams ending at positions below this are in `ends`

    def extend(self, tokens: list[int], upto: int) -> None:
        """Index every n-gram ending at a position in [indexed, upto)."""
        for end in range(max(self.indexed, self.low), upto):
            for n in range(self.low, min(self.high, end) + 1):
                self.ends.setdefault(tuple(tokens[end - n : end]), []).append(end)
        self.indexed = max(self.indexed, upto)

    def find(self, suffix: list[int], *, after: int | None = None) -> int | None:
        """The end of an occurrence of the longest indexed n-gram that `suffix` ends with:
        the first ending at or after `after` when given (else the last before it), else
        the most recent."""
        for n in range(min(self.high, len(suffix)), self.low - 1, -1):
            ends = self.ends.get(tuple(suffix[-n:]))
            if not ends:
                continue
            if after is None:
                return ends[-1]
            at = bisect.bisect_left(ends, after)
            return ends[at] if at < len(ends) else ends[-1]
        return None


class Drafter:
    """Prompt-lookup drafts for one row, and its acceptance so far."""

    def __init__(self, plan: DraftPlan) -> None:
        self.plan = plan
        self.limit = plan.num_draft_tokens or DEFAULT_DRAFT_TOKENS
        self.prediction = list(plan.prediction)
        self._predicted = NgramIndex(1, 6)
        self._predicted.extend(self.prediction, len(self.prediction))
        self._history = NgramIndex(2, 5)
        self._cursor = 0  # where the last kept prediction draft ended
        self._last_prediction_end: int | None = None
        # Acceptance, decayed: kept drafts, and drafts that were the first refused. A
        # prediction starts trusted; prompt lookup earns it.
        self._kept, self._refused = (8.0, 0.0) if self.prediction else (3.0, 1.0)
        self.proposed = 0
        self.accepted = 0  # drafted tokens the model kept (a stop may cut a few off later)

    def budget(self) -> int:
        """How many tokens to draft now: up to the limit, fewer while drafts are refused.

        With a per-token acceptance `a`, a draft of k tokens yields (1 - a**(k+1)) / (1 - a)
        tokens for a pass costing 1 + k * POSITION_COST steps: the k that yields the most
        per step's cost.
        """
        if self.plan.num_draft_tokens is not None:
            return self.limit
        rate = min((self._kept + 1) / (self._kept + self._refused + 2), 0.999)
        return max(
            range(1, self.limit + 1),
            key=lambda k: (1 - rate ** (k + 1)) / (1 - rate) / (1 + k * POSITION_COST),
        )

    def propose(self, history: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens expected after `history` (the prompt, the text so far and
        the token about to be fed); [] when nothing matches."""
        limit = min(limit, self.budget())
        self._last_prediction_end = None
        if limit <= 0:
            return []
        if self.prediction:
            end = self._predicted.find(history, after=self._cursor)
            if end is not None and end < len(self.prediction):
                self._last_prediction_end = end
                return self.prediction[end : end + limit]
        # Occurrences ending before the last position: the one ending there is the suffix.
        self._history.extend(history, len(history))
        end = self._history.find(history)
        if end is None:
            return []
        return history[end : end + limit]

    def observe(self, proposed: int, accepted: int) -> None:
        """The model kept the first `accepted` of `proposed` drafted tokens."""
        self.proposed += proposed
        self.accepted += accepted
        self._kept = 0.8 * self._kept + accepted
        self._refused = 0.8 * self._refused + (1 if accepted < proposed else 0)
        if self._last_prediction_end is not None:
            self._cursor = self._last_prediction_end + accepted

    @property
    def rejected(self) -> int:
        return self.proposed - self.accepted


class ForcedDrafter:
    """Token fast-forwarding: drafts are the tokens a grammar admits as the only way on
    (`forced(token)`: xgrammar's jump-forward tokens after the token about to be fed).
    Verified like any draft, so a forced token the model would have spelled otherwise (the
    grammar's tokenization is not always the model's) is refused, not forced."""

    fast_forward = True

    def __init__(self, forced: Callable[[int], list[int]], limit: int = MAX_DRAFT_TOKENS) -> None:
        self.forced, self.limit = forced, limit
        self.proposed = 0
        self.accepted = 0

    def propose(self, history: list[int], limit: int) -> list[int]:
        return list(self.forced(history[-1])[: min(limit, self.limit)])

    def observe(self, proposed: int, accepted: int) -> None:
        self.proposed += proposed
        self.accepted += accepted

    @property
    def rejected(self) -> int:
        return self.proposed - self.accepted


def common_prefix(a: tuple, b: tuple) -> int:
    """How many leading tokens two sequences share (slice compares run in C)."""
    size = min(len(a), len(b))
    if a[:size] == b[:size]:
        return size
    low, high = 0, size  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low
