"""Paused time, read from the service's events, so that latencies leave it out.

While the presenter pauses, nothing computes and every clock-based latency (TTFT, TPOT, E2E) would
count the pause. The service says when it pauses and resumes (status events); an iteration granted by
a single step while paused is computing time, so it is cut out of the pause. `running_s(t)` maps a
service time to the running time before it: a latency is the difference of two mapped times.
"""
from __future__ import annotations

import bisect

from ..event_hub import HubReader
from ..events import PAUSED, RESUMED


class Pauses(HubReader):
    """Fed status events (paused/resumed) and step events (a single step while paused)."""

    def __init__(self):
        super().__init__()
        self.closed: list[tuple[float, float]] = []  # paused intervals, in time order
        self.open_since: float | None = None         # paused now, since then

    def on_status(self, ev) -> None:
        if ev.t is not None:
            self._status(ev.event, ev.t)

    def on_step(self, msg) -> None:
        if self.open_since is not None:
            self._step(msg.event.t_start, msg.event.t_end)

    def _status(self, event: str, t: float) -> None:
        if event == PAUSED and self.open_since is None:
            self.open_since = t
        elif event == RESUMED and self.open_since is not None:
            self._close(t)
            self.open_since = None

    def _step(self, t0: float, t1: float) -> None:
        # The pause ends where the step starts and begins again where it ends (several lanes' steps
        # of one single step overlap: the pause resumes after the last of them).
        if self.open_since < t0:
            self._close(t0)
        self.open_since = max(self.open_since, t1)

    def _close(self, t: float) -> None:
        if t > self.open_since:
            self.closed.append((self.open_since, t))

    def paused_s(self, now: float | None = None) -> float:
        """All paused time so far (an open pause counts up to `now`)."""
        return self._before(float("inf"), now)

    def running_s(self, t: float | None, now: float | None = None) -> float | None:
        """t less the paused time before it (None stays None)."""
        return None if t is None else t - self._before(t, now)

    def _before(self, t: float, now: float | None) -> float:
        earlier = self.closed[:bisect.bisect_left(self.closed, (t,))]  # the pauses that began before t
        total = sum(min(b, t) - a for a, b in earlier)
        if self.open_since is not None and self.open_since < t:
            total += max(0.0, (t if now is None else min(t, now)) - self.open_since)
        return total
