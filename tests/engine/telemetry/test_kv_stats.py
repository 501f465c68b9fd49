"""The KV cache page's accounting (engine/telemetry/kv_stats.py) on hand-made step events: shared and cached
blocks, the prefix cache hit rate, and one request's block table."""
from __future__ import annotations

from engine.events import StepEvent
from engine.telemetry.kv_stats import KVStats
from event_factories import FIRST, SECOND, hub_with, kv_step as step

def consumed(*events: StepEvent) -> KVStats:
    stats = KVStats()
    stats.consume(hub_with(*events))
    return stats


def test_table_counts_shared_and_cached_blocks_and_the_hit_rate():
    [row] = consumed(FIRST, SECOND).table()
    assert row["shared blocks"] == 2 and row["cached blocks (evictable)"] == 2
    assert row["prefix hit rate %"] == 40.0  # 8 hit of 20 looked up
    assert row["blocks used / pool"] == "4 / 16"


def test_no_lookups_no_hit_rate():
    [row] = consumed(step(0, {1: [0]}, {1: 3})).table()
    assert row["prefix hit rate %"] is None and row["shared blocks"] == 0 and row["cached blocks (evictable)"] == 0


def test_block_rows_show_shared_blocks_their_holders_and_what_came_from_the_cache():
    stats = consumed(FIRST, SECOND)
    rows = stats.block_rows("cached", 2)
    assert [r["physical block"] for r in rows] == [0, 1, 3]
    assert [r["from prefix cache"] for r in rows] == [True, True, False]
    assert [r["holders (ref count)"] for r in rows] == [2, 2, 1]
    assert [r["shared with"] for r in rows] == ["#1", "#1", ""]
    assert [r["tokens"] for r in rows] == [4, 4, 2]
    assert [r["from prefix cache"] for r in stats.block_rows("cached", 1)] == [False, False, False]
    assert stats.block_rows("cached", 99) == [] and stats.block_rows("no such lane", 1) == []


def test_request_to_show_prefers_the_pick_then_the_one_sharing_most():
    stats = consumed(FIRST, SECOND, step(2, {1: [0, 1, 2], 2: [0, 1, 3], 3: [5]}, {1: 12, 2: 11, 3: 2}))
    assert stats.request_to_show("cached", 3) == 3
    assert stats.request_to_show("cached", 42) == 2  # not holding KV: the newest of those sharing the most
    assert stats.request_to_show("cached", None) == 2
    assert consumed(step(0, {}, {})).request_to_show("cached", 1) is None
    assert KVStats().request_to_show("cached", 1) is None
