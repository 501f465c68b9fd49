"""HandOffs (a disaggregated lane's prefill half) on its own: with a scheduler and no model."""
from __future__ import annotations

from engine.hand_offs import HandOffs
from scheduler_helpers import request, scheduler, step


def test_a_request_leaves_with_its_first_token_and_its_blocks_stay_until_released():
    s = scheduler(num_blocks=16, block_size=4, max_num_batched_tokens=10)
    live = {}
    hand = HandOffs(s, live)
    long, short = request(0, 14), request(1, 6)  # 14 tokens take two steps of a 10-token budget
    for r in (long, short):
        live[r.request_id] = r
        s.add(r)
    hand.take(step(s).rows)  # the long one's first chunk: nothing sampled yet
    assert hand.news() == [] and set(live) == {0, 1}
    out = step(s)
    hand.take(out.rows)
    assert hand.news() == [0, 1] and hand.news() == []  # told once
    assert not live and not s.running and not s.waiting
    assert hand.kv_tokens == {0: 14, 1: 6}
    handed = hand.kv([1, 0, 9])  # an unknown id is skipped
    tables = s.cache.block_tables
    assert [(r.request_id, blocks) for r, blocks in handed] == [(1, tables[1]), (0, tables[0])]
    assert len(handed[1][1]) == 4 and s.cache.num_free == 16 - 4 - 2  # held here until released
    hand.release([0, 0])
    assert 0 not in hand.sent and 0 not in hand.kv_tokens and s.cache.num_free == 16 - 2
    hand.release([1])
    assert not hand.sent and s.cache.num_free == 16
