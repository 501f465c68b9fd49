"""StepEventBuilder on its own: a scheduler with the fake runner, no model."""
from __future__ import annotations

from engine.events import DECODE, PREFILL
from engine.step_event_builder import StepDone, StepEventBuilder
from scheduler_helpers import request, scheduler, step


def test_an_event_holds_the_steps_rows_its_kv_and_only_the_waits_that_changed():
    s = scheduler(num_blocks=16, block_size=4, max_num_seqs=1)
    builder = StepEventBuilder(s.cfg, host_same_ram=True, num_blocks=s.cache.num_blocks)
    for r in (request(0, 6, max_tokens=2), request(1, 3, max_tokens=2)):
        s.add(r)
    def build(n, out, done, t0, t1):
        return builder.build(n, out, builder.snapshot(out, s), done, t0, t1)
    first = build(1, step(s), StepDone(sampled={0: 7}), 0.0, 1.0)
    assert [(e.request_id, e.phase, e.num_tokens) for e in first.entries] == [(0, PREFILL, 6)]
    assert first.block_tables == {0: s.cache.block_tables[0]} and first.kv_tokens == {0: 6}
    assert first.used_blocks == 2 and first.reserved_unused_slots == 2 * 4 - 6 and first.sampled == {0: 7}
    assert first.waits[1]["why"] == "batch_full" and (first.num_running, first.num_waiting) == (1, 1)
    second = build(2, step(s), StepDone(finished=[0]), 1.0, 2.0)
    assert [(e.request_id, e.phase) for e in second.entries] == [(0, DECODE)] and second.finished == [0]
    assert second.waits == {} and builder.waits[1]["why"] == "batch_full"  # unchanged: not sent again
    third = build(3, step(s), StepDone(held_for_copy={0: 7}), 2.0, 3.0)
    assert third.waits == {1: None} and builder.waits == {}  # request 1 runs now
    assert third.kv_tokens == {1: 3, 0: 7} and third.strategy == "continuous" and third.step == 3
