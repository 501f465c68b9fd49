"""EventHub: a bounded ring buffer of engine events with sequence numbers, and HubReader, its reader.

Writers (engine threads) append events (engine/events.py), which the hub holds as they are; readers
keep their own cursor. A reader that falls more than `capacity` events behind skips the oldest ones and
is told how many it missed, so memory stays flat however slow a reader is. Listeners instead see every
event, in the publishing thread (the Prometheus counters must miss none).

It sits in the core beside the contract, not in serving/: the replayer fills one from a recording,
and readers in every layer (KV statistics, the narration, the live metrics) read one.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

from .events import EVENTS

log = logging.getLogger(__name__)

@dataclass
class Batch:
    events: list       # (seq, event) pairs, oldest first
    cursor: int        # pass back to read the next batch
    skipped: int       # events dropped before this reader saw them (coalesced)


class EventHub:
    def __init__(self, capacity: int = 2048):
        self.capacity = capacity
        self._buf: deque = deque(maxlen=capacity)
        self._next_seq = 0
        self._cond = threading.Condition()
        self._listeners: tuple = ()

    def add_listener(self, fn) -> None:
        """fn(event) is called for every event published from now on; it must be quick."""
        self._listeners = (*self._listeners, fn)

    def publish(self, event) -> int:
        with self._cond:
            seq = self._next_seq
            self._buf.append((seq, event))
            self._next_seq += 1
            self._cond.notify_all()
        for fn in self._listeners:
            try:
                fn(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop an engine thread
                log.exception("event listener failed")
        return seq

    @property
    def head(self) -> int:
        """The sequence number the next event will get (a cursor that sees only new events)."""
        return self._next_seq

    def read(self, cursor: int, limit: int | None = None, timeout: float | None = None) -> Batch:
        """Events with seq >= cursor (waiting up to timeout for one to arrive)."""
        with self._cond:
            if timeout and cursor >= self._next_seq:
                self._cond.wait_for(lambda: cursor < self._next_seq, timeout)
            if not self._buf or cursor >= self._next_seq:
                return Batch([], max(cursor, 0), 0)
            oldest = self._buf[0][0]
            skipped = max(0, oldest - cursor)
            start = max(cursor, oldest) - oldest
            stop = len(self._buf) if limit is None else min(len(self._buf), start + limit)
            events = [self._buf[i] for i in range(start, stop)]
            return Batch(events, events[-1][0] + 1, skipped)

    def __len__(self) -> int:
        return len(self._buf)


_HANDLERS = {e.TYPE: f"on_{e.TYPE}" for e in EVENTS}  # "step" -> on_step, "request" -> on_request, ...


class HubReader:
    """Reads a hub from its own cursor and hands each event to the method named for its type (on_step,
    on_request, on_finished, on_status, on_waits, on_lanes, on_gpu, on_remote_metrics): a reader
    defines the ones it needs. on_event is also a hub listener (EventHub.add_listener)."""

    LIMIT = 20000  # events taken per consume(): a page's rerun stays short however far behind it is

    def __init__(self, cursor: int = 0):
        self.cursor = cursor  # the sequence number of the next event to read
        self.skipped = 0      # events the hub dropped before this reader read them

    def consume(self, hub: EventHub) -> None:
        batch = hub.read(self.cursor, limit=self.LIMIT)
        self.cursor = batch.cursor
        if batch.skipped:
            self.skipped += batch.skipped
            self.on_skipped()
        for _, event in batch.events:
            self.on_event(event)

    def on_event(self, event) -> None:
        handler = getattr(self, _HANDLERS.get(event.TYPE, ""), None)
        if handler is not None:
            handler(event)

    def on_skipped(self) -> None:
        """The hub dropped events this reader never saw (it was too slow)."""
