"""Stop sequences matched on decoded text, so they work across token boundaries."""

from __future__ import annotations


class StopMatcher:
    """Holds back text that may still become a stop sequence.

    Text is released only once no stop sequence can start inside it, so no
    part of a stop string is ever streamed to a client.
    """

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._stop = stop
        self._buffer = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """Add decoded text; return the part that is safe to emit now."""
        if self.matched is not None:
            return ""
        self._buffer += text
        if not self._stop:
            out, self._buffer = self._buffer, ""
            return out
        hit = self._earliest_match()
        if hit is not None:
            index, self.matched = hit
            out, self._buffer = self._buffer[:index], ""
            return out
        keep = self._longest_partial_suffix()
        cut = len(self._buffer) - keep
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out

    def flush(self) -> str:
        """Release what was held back (the sequence ended without a match)."""
        out, self._buffer = self._buffer, ""
        return out

    def _earliest_match(self) -> tuple[int, str] | None:
        best = None
        for stop in self._stop:
            index = self._buffer.find(stop)
            if index >= 0 and (best is None or index < best[0]):
                best = (index, stop)
        return best

    def _longest_partial_suffix(self) -> int:
        """Length of the longest buffer suffix that is a proper prefix of a stop."""
        longest = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(self._buffer)), longest, -1):
                if self._buffer.endswith(stop[:size]):
                    longest = size
                    break
        return longest
