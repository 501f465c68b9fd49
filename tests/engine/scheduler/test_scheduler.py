"""Scheduling decisions, step by step, without a model: token counts, admission, preemption, launches."""
from __future__ import annotations

from engine.request import RequestStatus
from scheduler_helpers import TOKEN, FakeClock, request, rows, scheduler, step


def test_chunked_prefill_fills_the_token_budget():
    s = scheduler(max_num_batched_tokens=8)
    s.add(request(0, prompt_len=20, max_tokens=2))
    s.add(request(1, prompt_len=5, max_tokens=2))
    assert rows(step(s)) == [(0, "prefill", 8, 0)]
    assert rows(step(s)) == [(0, "prefill", 8, 0)]
    out = step(s)  # request 0's last chunk samples its first token; request 1 takes the rest
    assert rows(out) == [(0, "prefill", 4, 0), (1, "prefill", 4, 0)] and out.num_tokens == 8
    assert rows(step(s)) == [(0, "decode", 1, 0), (1, "prefill", 1, 0)]
    assert rows(step(s)) == [(1, "decode", 1, 0)]
    assert not s.has_work()


def test_without_chunking_a_prompt_waits_for_a_budget_that_holds_it():
    s = scheduler(max_num_batched_tokens=8, enable_chunked_prefill=False)
    s.add(request(0, prompt_len=6, max_tokens=3))
    s.add(request(1, prompt_len=6, max_tokens=3))
    assert rows(step(s)) == [(0, "prefill", 6, 0)]
    assert rows(step(s)) == [(0, "decode", 1, 0), (1, "prefill", 6, 0)]


def test_admission_stops_at_the_head_of_the_queue():
    s = scheduler(num_blocks=4, block_size=4, max_num_batched_tokens=64)
    for rid, n in enumerate((10, 8, 2)):  # 3 blocks, then 2 (1 left: no), then 1 (would fit)
        s.add(request(rid, prompt_len=n))
    out = step(s)
    assert out.admitted == [0] and [r.request_id for r in s.waiting] == [1, 2]


def test_preemption_takes_the_newest_and_it_recomputes_its_output_so_far():
    s = scheduler(num_blocks=4, block_size=2, max_num_batched_tokens=64)
    for rid, max_tokens in enumerate((2, 5, 5)):
        s.add(request(rid, prompt_len=2, max_tokens=max_tokens))
    assert rows(step(s)) == [(0, "prefill", 2, 0), (1, "prefill", 2, 0), (2, "prefill", 2, 0)]
    # every decode needs a second block: only one is free, so request 2 (the newest) makes room
    out = step(s)
    assert out.preempted == [2] and rows(out) == [(0, "decode", 1, 0), (1, "decode", 1, 0)]
    victim = s.waiting[0]
    assert (victim.request_id, victim.status, victim.num_computed_tokens, victim.num_preemptions) == (
        2, RequestStatus.WAITING, 0, 1)
    assert victim.output_token_ids == [TOKEN] and 2 not in s.cache.block_tables
    # request 0 finished and freed its blocks: request 2 recomputes prompt + its one output token
    out = step(s)
    assert rows(out) == [(1, "decode", 1, 0), (2, "prefill", 3, 0)] and out.num_tokens == 4


def test_static_launches_only_a_full_batch_padded_to_the_longest_prompt():
    s = scheduler("static", static_batch_size=3)
    s.add(request(0, prompt_len=5, max_tokens=2))
    s.add(request(1, prompt_len=2, max_tokens=6))
    assert rows(step(s)) == [] and s.num_waiting == 2
    s.add(request(2, prompt_len=3, max_tokens=2))
    out = step(s)
    assert rows(out) == [(0, "prefill", 5, 0), (1, "prefill", 2, 3), (2, "prefill", 3, 2)]
    assert out.num_tokens == 15 and out.admitted == [0, 1, 2]
    # each row reserves KV for prompt + max_tokens up front (block size 4)
    assert [len(s.cache.block_tables[r]) for r in (0, 1, 2)] == [2, 2, 2]


def test_dynamic_launches_a_partial_batch_when_the_oldest_has_waited_long_enough():
    clock = FakeClock()
    s = scheduler("dynamic", static_batch_size=4, static_max_wait_s=0.5, clock=clock)
    s.add(request(0, prompt_len=3, arrival_s=0.0))
    clock.t = 0.49
    assert rows(step(s)) == []
    clock.t = 0.5
    assert rows(step(s)) == [(0, "prefill", 3, 0)]


def test_finished_static_rows_are_computed_as_padding_until_the_batch_ends():
    s = scheduler("static", static_batch_size=2)
    s.add(request(0, prompt_len=2, max_tokens=1))
    s.add(request(1, prompt_len=2, max_tokens=3))
    step(s)  # prefill: both sample; request 0 is done
    held = s.cache.num_free
    assert rows(step(s)) == [(0, "padding", 0, 1), (1, "decode", 1, 0)]
    assert 0 in s.cache.block_tables and s.cache.num_free == held  # its slot and KV are kept
    assert rows(step(s)) == [(0, "padding", 0, 1), (1, "decode", 1, 0)]
    assert not s.cache.block_tables and not s.has_work()  # the batch ended: everything freed


def test_update_counts_tokens_and_times_the_first_one():
    s = scheduler(max_num_batched_tokens=4)
    s.add(request(0, prompt_len=6, max_tokens=3))
    out = s.schedule()
    assert s.update(out, [], now=1.0) == []  # a prompt chunk samples nothing
    req = s.running[0]
    assert (req.num_computed_tokens, req.first_token_s) == (4, None)
    out = s.schedule()
    assert s.update(out, [11], now=2.0) == [(req, 11)]
    assert (req.num_computed_tokens, req.output_token_ids, req.first_token_s) == (6, [11], 2.0)
    s.finish(req, "abort", now=3.0)
    assert (req.status, req.finish_reason, req.finish_s) == (RequestStatus.FINISHED, "abort", 3.0)
    assert not s.running and not s.cache.block_tables
