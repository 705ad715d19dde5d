"""How much of the machine went to work other than the benchmark (Linux /proc; None elsewhere).

On 2 cores any other busy process (tests, another server) skews every figure, so each
server's phase records the share of CPU that neither it nor this client used.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def system_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks over all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def process_ticks(pid: int) -> int:
    # The command name (field 2) may hold spaces, so split after its closing parenthesis.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime, all threads


def own_ticks() -> int:
    times = os.times()
    return round((times.user + times.system) * os.sysconf("SC_CLK_TCK"))


class OtherLoad:
    """Share of all cores used by anything but `pid` and this process, from start to stop."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = self.sample()

    def sample(self) -> tuple[int, int, int, int] | None:
        try:
            return (*system_ticks(), process_ticks(self.pid), own_ticks())
        except (OSError, ValueError, IndexError):
            return None

    def share(self) -> float | None:
        end = self.sample()
        if self.start is None or end is None:
            return None
        busy, total, server, own = (b - a for a, b in zip(self.start, end, strict=True))
        return max(busy - server - own, 0) / max(total, 1)


def cpu_busy(seconds: float = 2.0) -> float | None:
    """Share of all cores busy over `seconds`."""
    try:
        busy0, total0 = system_ticks()
        time.sleep(seconds)
        busy1, total1 = system_ticks()
    except (OSError, ValueError, IndexError):
        return None
    return (busy1 - busy0) / max(total1 - total0, 1)
