"""Steps are stamped as the hub publishes them (engine/serving/stamped_publish.py): while a lane is switched,
its old worker drains as the new one starts, and a reader that takes each step's KV changes and continued
rows against the lane's previous step it received has them whole, whichever worker sent which."""
from __future__ import annotations

import json
import random

from engine.event_hub import EventHub
from engine.events import DECODE, StepEntry, StepEvent, StepMessage, StepRows
from engine.kv_wire import fold_kv
from engine.serving.stamped_publish import StampedPublish
from engine.wire_json import dumps


def step(t: float, rows: dict[int, int], tables: dict[int, list[int]]) -> StepMessage:
    entries = [StepEntry(rid, DECODE, 1, ctx, slot) for slot, (rid, ctx) in enumerate(rows.items())]
    ev = StepEvent(step=1, strategy="continuous", t_start=t, t_end=t, entries=entries, num_waiting=0,
                   num_running=len(rows), admitted=[], finished=[], preempted=[], tokens_used=len(rows), token_budget=8,
                   num_blocks=64, block_size=4, used_blocks=sum(map(len, tables.values())), block_tables=tables,
                   kv_tokens=dict(rows), reserved_unused_slots=0)
    return StepMessage(event=ev, lane="a", strategy="continuous")


def test_two_workers_of_one_lane_publish_steps_a_reader_takes_whole():
    hub, rng = EventHub(1000), random.Random(7)
    publish = StampedPublish(hub.publish)
    workers = {"old": ({1: 10, 2: 20}, {1: [0, 1, 2], 2: [3, 4, 5, 6, 7]}),
               "new": ({7: 3, 8: 4}, {7: [9], 8: [10, 11]})}
    for i in range(40):  # interleaved as two threads would: each worker's rows go on, a token a step
        rows, tables = workers[rng.choice(["old", "new"])]
        for rid in rows:
            rows[rid] += 1
            if rows[rid] % 4 == 1:
                tables[rid] = [*tables[rid], 20 + i]
        publish(step(0.01 * i, dict(rows), {r: list(t) for r, t in tables.items()}))
    reader, kv = StepRows(), None
    sent = [item for _, item in hub.read(0).events]
    assert any("cont" in item.wire() for item in sent)
    for item in sent:
        got = reader.resolve(json.loads(dumps(item.wire())))
        kv = fold_kv(kv, got["kv"], got["entries"])
        assert got["entries"] == item.key_wire()["entries"] and kv == item.key_wire()["kv"]


def test_other_events_pass_as_they_are():
    hub = EventHub(10)
    StampedPublish(hub.publish)("not a step")
    assert [e for _, e in hub.read(0).events] == ["not a step"]
