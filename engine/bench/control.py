"""Progress reports and cancellation for benchmark runs (a UI runs them in a background thread)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class Cancelled(Exception):
    """The benchmark was cancelled through its cancel flag."""


@dataclass
class Progress:
    """strategy: the lane's name (a peer's name for a peer); stage: "load" | "warmup" | "run" | "done";
    done/total: finished requests of this run."""
    strategy: str
    stage: str
    done: int = 0
    total: int = 0
    rate: float | None = None   # the arrival rate of this run (None: offline)
    message: str = ""


ProgressFn = Callable[[Progress], None]


def is_cancelled(cancel) -> bool:
    """cancel: None, a threading.Event (anything with is_set()), or a callable returning bool."""
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


def check_cancel(cancel) -> None:
    if is_cancelled(cancel):
        raise Cancelled("benchmark cancelled")


class CpuShare:
    """How much of the machine's CPU other processes used during a run (Linux /proc/stat).

    On a shared CPU other processes change step times a lot (with torch's threads spinning at
    barriers, a step can take ten times longer), so each run records it:
    other_cpu_pct = 100 * (CPU time all processes used - CPU time this process used) /
    (wall time x cores). None where /proc/stat is missing."""

    def __init__(self):
        self.start = self._snapshot()

    @staticmethod
    def _snapshot():
        import os
        import time
        try:
            with open("/proc/stat") as f:
                vals = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        t = os.times()
        return sum(vals) - vals[3] - vals[4], t.user + t.system, time.monotonic()

    def other_cpu_pct(self) -> float | None:
        import os
        end = self._snapshot()
        if self.start is None or end is None or end[2] <= self.start[2]:
            return None
        busy_s = (end[0] - self.start[0]) / os.sysconf("SC_CLK_TCK")
        own_s = end[1] - self.start[1]
        return round(max(0.0, 100.0 * (busy_s - own_s) / ((end[2] - self.start[2]) * (os.cpu_count() or 1))), 1)


def report(progress: ProgressFn | None, **kw) -> None:
    if progress is not None:
        progress(Progress(**kw))
