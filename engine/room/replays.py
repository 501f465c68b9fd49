"""How much one viewer may make the server send again: events it asks for from the ring buffer's past
(a subscribe with `from_seq`) draw on a byte budget per client key, a burst that refills at a steady
rate, shared by all its sockets. A live view that connects or changes lanes replays the ring once, well
within the burst; a client that re-subscribes in a loop gets the rest of each replay skipped (told how
many events it missed) and only new events, instead of making the server resend the ring over and over
(375 MB in 20 s, measured before this bound). The presenter is not limited.
"""
from __future__ import annotations

import threading
import time

MiB = 1 << 20
MAX_TRACKED_CLIENTS = 10_000  # the fullest (idlest) entries are dropped beyond this


class ReplayBudget:
    def __init__(self, burst_bytes: int = 16 * MiB, bytes_per_s: float = 1 * MiB, clock=time.monotonic):
        self.burst, self.rate, self.clock = burst_bytes, bytes_per_s, clock
        self._left: dict[str, tuple[float, float]] = {}  # key -> (bytes left, when)
        self._lock = threading.Lock()

    def spend(self, key: str, nbytes: int) -> bool:
        """Whether `key` may be sent `nbytes` of replayed events now (then they are counted; a client with
        any budget left may overdraw it by one message, which later refills pay back)."""
        with self._lock:
            left = self._refilled(key)
            if left <= 0:
                return False
            self._left[key] = (left - nbytes, self.clock())
            if len(self._left) > MAX_TRACKED_CLIENTS:
                del self._left[max(self._left, key=lambda k: self._left[k][0])]
            return True

    def _refilled(self, key: str) -> float:
        left, when = self._left.get(key, (self.burst, self.clock()))
        return min(self.burst, left + (self.clock() - when) * self.rate)
