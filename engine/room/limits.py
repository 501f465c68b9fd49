"""Per-client submission limits for a room: rate, requests in flight, output length.

They apply to viewers only (the presenter and in-process callers are not limited). A client is
keyed by its IP address, so opening more sockets or tabs does not multiply its share; a phone that
joined through /join by its signed id, with its address's allowance (PHONES_PER_ADDRESS phones' worth)
as an outer bound, so a room behind one tunnel is not one person. Defaults
(override with the environment variables named in `ClientLimits.from_env`): bursts of 8, then
30 submissions a minute, 8 requests in flight, 512 new tokens per request.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from ..untrusted import is_int

MAX_TRACKED_CLIENTS = 10_000  # idle entries are dropped beyond this
PHONES_PER_ADDRESS = 32       # behind one address (a tunnel, a proxy), at most this many clients' worth


class LimitExceeded(ValueError):
    """A viewer went over a limit (HTTP 429)."""


@dataclass(frozen=True)
class ClientLimits:
    burst: int = 8                # submissions allowed at once
    per_minute: float = 30.0      # sustained submission rate
    max_in_flight: int = 8        # unfinished requests at a time
    max_tokens: int = 512         # max_tokens per request

    def __post_init__(self):
        for name in ("burst", "max_in_flight", "max_tokens"):
            v = getattr(self, name)
            if not is_int(v) or v < 1:
                raise ValueError(f"ClientLimits.{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.per_minute, (int, float)) or not self.per_minute > 0:
            raise ValueError(f"ClientLimits.per_minute must be a number > 0, got {self.per_minute!r}")

    def scaled(self, n: int) -> ClientLimits:
        """n clients' worth (what one address may take in all)."""
        return ClientLimits(self.burst * n, self.per_minute * n, self.max_in_flight * n, self.max_tokens)

    @classmethod
    def from_env(cls, environ=os.environ) -> ClientLimits:
        names = {"burst": "INFLIGHT_SUBMIT_BURST", "per_minute": "INFLIGHT_SUBMITS_PER_MINUTE",
                 "max_in_flight": "INFLIGHT_MAX_IN_FLIGHT", "max_tokens": "INFLIGHT_MAX_TOKENS"}
        kw = {}
        for field, var in names.items():
            raw = environ.get(var)
            if raw:
                try:
                    kw[field] = float(raw) if field == "per_minute" else int(raw)
                except ValueError:
                    raise ValueError(f"{var} must be a number, got {raw!r}") from None
        return cls(**kw)


class Reservation:
    """One admitted submission: running until the handles it holds have all finished."""

    def __init__(self):
        self.handles = None  # None: still being queued

    def hold(self, handles) -> None:
        self.handles = handles

    @property
    def running(self) -> bool:
        return self.handles is None or not all(h.finished for h in self.handles)


class ClientLimiter:
    """A token bucket and an in-flight count per client key, and the same, PHONES_PER_ADDRESS times
    larger, per address (a client's `outer` key) for clients that have a key of their own. Thread-safe."""

    def __init__(self, limits: ClientLimits | None = None, clock=time.monotonic):
        self.limits = limits or ClientLimits()
        self.outer_limits = self.limits.scaled(PHONES_PER_ADDRESS)
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens, last refill time)
        self._in_flight: dict[str, list[Reservation]] = {}   # key -> submissions not yet finished

    def admit(self, key: str, max_tokens: int, outer: str | None = None) -> Reservation:
        """Take one submission from `key`'s allowance (and from its address's, `outer`), or raise
        LimitExceeded saying which limit. The submission counts as in flight from now until its
        handles (see Reservation.hold) finish."""
        if max_tokens > self.limits.max_tokens:
            raise LimitExceeded(f"max_tokens is limited to {self.limits.max_tokens} per request in this room "
                                f"(asked for {max_tokens})")
        keys = [(key, self.limits, "your"), *([(outer, self.outer_limits, "your address's")] if outer else [])]
        with self._lock:
            tokens = [self._check(k, lim, whose) for k, lim, whose in keys]
            reservation = Reservation()
            for (k, _, _), left in zip(keys, tokens):
                self._buckets[k] = (left - 1, self.clock())
                self._in_flight.setdefault(k, []).append(reservation)
            self._prune()
            return reservation

    def _check(self, key: str, lim: ClientLimits, whose: str) -> float:
        """key's tokens now; LimitExceeded if it may not submit."""
        running = self._running(key)
        if running >= lim.max_in_flight:
            raise LimitExceeded(f"{running} of {whose} requests are still running (the limit is "
                                f"{lim.max_in_flight}); wait for one to finish")
        tokens = self._refill(key, lim)
        if tokens < 1:
            wait = (1 - tokens) * 60 / lim.per_minute
            raise LimitExceeded(f"too many submissions: at most {lim.burst} at once and "
                                f"{lim.per_minute:g} a minute ({whose} limit); try again in {wait:.1f} s")
        return tokens

    def _running(self, key: str) -> int:
        live = [r for r in self._in_flight.get(key, ()) if r.running]
        if live:
            self._in_flight[key] = live
        else:
            self._in_flight.pop(key, None)
        return len(live)

    def _refill(self, key: str, lim: ClientLimits) -> float:
        tokens, last = self._buckets.get(key, (float(lim.burst), self.clock()))
        return min(float(lim.burst), tokens + (self.clock() - last) * lim.per_minute / 60)

    def _prune(self) -> None:
        if len(self._buckets) <= MAX_TRACKED_CLIENTS:
            return
        for key in list(self._buckets):  # a full bucket of either size is as good as none
            if self._refill(key, self.limits) >= self.limits.burst and not self._running(key):
                del self._buckets[key]
