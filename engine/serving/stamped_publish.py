"""Steps onto the hub, each stamped against the step its lane published last of the same KV pool
(engine/kv_wire.py KvFrames: a step's KV changes, and its rows that go on, are sent relative to that one).
Readers take a step relative to the previous step of its lane they received, so the stamp follows the hub's
order whoever publishes: while a lane is switched (local and remote, a restart) its old worker drains as
the new one starts, two threads publishing under one name."""
from __future__ import annotations

import threading

from ..events import StepMessage
from ..kv_wire import KvFrames


class StampedPublish:
    def __init__(self, publish):
        self._publish = publish
        self._frames: dict[str, KvFrames] = {}  # lane -> its pools' last published steps
        self._lock = threading.Lock()

    def __call__(self, event):
        if not isinstance(event, StepMessage):
            return self._publish(event)
        with self._lock:  # (stamped and published as one: the next step's base is the one readers got)
            self._frames.setdefault(event.lane, KvFrames()).stamp(event.event)
            return self._publish(event)
