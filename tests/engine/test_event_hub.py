"""EventHub: ordered sequence numbers, per-reader cursors, bounded memory, flagged coalescing."""
from __future__ import annotations

import threading

from engine.event_hub import EventHub


def test_readers_keep_their_own_cursor():
    hub = EventHub(capacity=10)
    for i in range(5):
        hub.publish({"i": i})
    a = hub.read(0, limit=2)
    assert [s for s, _ in a.events] == [0, 1] and a.cursor == 2 and a.skipped == 0
    b = hub.read(0)
    assert [e["i"] for _, e in b.events] == [0, 1, 2, 3, 4]
    assert hub.read(a.cursor).events[0][0] == 2
    assert hub.read(hub.head).events == []


def test_slow_reader_skips_and_is_told_memory_stays_bounded():
    hub = EventHub(capacity=100)
    for i in range(10_000):
        hub.publish({"i": i})
    assert len(hub) == 100
    batch = hub.read(0)
    assert batch.skipped == 9_900 and batch.events[0][0] == 9_900 and batch.cursor == 10_000


def test_blocking_read_wakes_on_publish():
    hub = EventHub()
    got = []
    t = threading.Thread(target=lambda: got.append(hub.read(0, timeout=5)))
    t.start()
    hub.publish({"x": 1})
    t.join(5)
    assert got and got[0].events[0][1] == {"x": 1}


def test_listeners_see_every_event_and_a_failing_one_harms_nothing():
    hub = EventHub(capacity=4)
    seen = []

    def broken(_):
        raise RuntimeError("listener bug")

    hub.add_listener(broken)
    hub.add_listener(seen.append)
    for i in range(10):
        assert hub.publish({"i": i}) == i
    assert [e["i"] for e in seen] == list(range(10))  # the ring kept 4; the listener saw all
