"""Full collections skip what lives long (engine/gc_pauses.py), and a dropped engine's cycles are still
collected when its lane lets it go."""
from __future__ import annotations

import gc
import weakref

from engine.gc_pauses import collect_dropped, freeze_long_lived


class Node:
    """A reference cycle: reference counting alone never frees it."""

    def __init__(self):
        self.me = self


def walked(obj) -> bool:
    """Would a full collection look at obj?"""
    return any(o is obj for o in gc.get_objects())


def test_what_exists_when_frozen_is_skipped_and_what_comes_after_is_not():
    try:
        old = Node()
        freeze_long_lived()
        new = Node()
        assert not walked(old) and walked(new)
    finally:
        collect_dropped()


def test_a_dropped_object_frozen_in_a_cycle_is_collected_and_the_living_stay_frozen():
    try:
        dropped, kept = Node(), Node()
        gone = weakref.ref(dropped)
        freeze_long_lived()
        del dropped
        gc.collect()
        assert gone() is not None, "a full collection walked a frozen object"
        collect_dropped()  # not told what was dropped: only what came since the freeze is walked
        assert gone() is not None
        collect_dropped(gone)
        assert gone() is None and not walked(kept)
    finally:
        collect_dropped()


def test_cycles_made_since_the_freeze_are_collected_without_walking_the_frozen():
    try:
        freeze_long_lived()
        later = Node()
        gone = weakref.ref(later)
        del later
        collect_dropped()
        assert gone() is None
    finally:
        collect_dropped()
