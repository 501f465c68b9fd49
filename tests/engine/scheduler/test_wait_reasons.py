"""Why a request waits, from the scheduler's own decision at each step, without a model: batch full, token
budget spent, KV blocks short, a static batch filling up or in flight, behind the policy's order,
preempted for blocks or by a higher priority; and the changes a step event carries."""
from __future__ import annotations

from engine.scheduler import waits
from engine.scheduler.waits import changes, kind, say
from scheduler_helpers import FakeClock, request, scheduler, step


def why(out, rid) -> dict:
    return out.waits[rid]


def test_batch_full_when_max_num_seqs_rows_run():
    s = scheduler(max_num_seqs=2)
    for rid in range(3):
        s.add(request(rid, prompt_len=4, max_tokens=5))
    out = step(s)
    assert why(out, 2) == {"why": "batch_full", "running": 2, "max": 2} and set(out.waits) == {2}
    assert say(why(out, 2)) == "batch full: 2 of max_num_seqs=2 rows already run" and kind("batch_full") == "capacity"


def test_token_budget_spent_and_unchunked_prompt_too_long():
    s = scheduler(max_num_batched_tokens=8)
    s.add(request(0, prompt_len=8))
    s.add(request(1, prompt_len=4))
    assert why(step(s), 1) == {"why": "token_budget", "left": 0, "budget": 8}
    s = scheduler(max_num_batched_tokens=8, enable_chunked_prefill=False)
    s.add(request(0, prompt_len=5))
    s.add(request(1, prompt_len=6))
    assert why(step(s), 1) == {"why": "token_budget", "left": 3, "budget": 8}


def test_kv_blocks_short_names_what_it_needs_and_what_is_free():
    s = scheduler(num_blocks=4, block_size=4, max_num_batched_tokens=64)
    s.add(request(0, prompt_len=10))
    s.add(request(1, prompt_len=8))
    out = step(s)
    assert why(out, 1) == {"why": "kv_blocks", "need": 2, "free": 1}
    assert say(why(out, 1)) == "KV blocks short: needs 2, 1 free"


def test_behind_the_head_in_the_policys_order():
    s = scheduler(max_num_seqs=1, scheduling_policy="sjf")
    s.add(request(0, prompt_len=4, max_tokens=20))
    step(s)  # 0 runs
    for rid, n in ((1, 9), (2, 3), (3, 6)):
        s.add(request(rid, prompt_len=n, max_tokens=4))
    out = step(s)
    assert why(out, 2)["why"] == "batch_full"  # the shortest job heads the queue
    assert why(out, 3) == {"why": "behind", "head": 2, "rank": 2, "of": 3, "order": "shortest job first"}
    assert why(out, 1)["rank"] == 3 and say(why(out, 1)) == "behind #2 in the queue: number 3 of 3 by shortest job first"
    s = scheduler(max_num_seqs=1)
    for rid in range(3):
        s.add(request(rid, prompt_len=4))
    assert why(step(s), 2)["order"] == "arrival"


def test_a_long_queue_gives_exact_places_up_front_and_one_steady_reason_behind_them():
    """The first QUEUE_SHOWN requests have their place in line; the rest share a reason that holds while
    the queue moves, so a step changes at most a few reasons however long the queue (every exact place
    changes whenever the head leaves)."""
    shown = waits.QUEUE_SHOWN
    s = scheduler(max_num_seqs=2, num_blocks=4096)
    for rid in range(3 * shown):
        s.add(request(rid, prompt_len=4, max_tokens=1 + rid % 3))
    seen: dict = {}
    for _ in range(12):
        out = step(s)
        queue = [r.request_id for r in s.waiting]
        assert out.waits[queue[0]]["why"] == "batch_full"
        for rank, rid in enumerate(queue[1:], 2):
            expected = (waits.behind(queue[0], rank, len(queue), "arrival") if rank <= shown
                        else waits.queued(shown, "arrival"))
            assert out.waits[rid] == expected
        moved = changes(seen, out.waits)
        assert not seen or len(moved) <= shown + 2, len(moved)  # the first places, and who left
        seen = out.waits
    assert say(waits.queued(shown, "arrival")) == f"in the queue with {shown} or more ahead of it by arrival"
    assert kind(waits.QUEUED) == "deferred"


def test_behind_an_aged_job_the_reason_is_the_starvation_bound_not_its_length():
    """#1 (64 tokens) has waited past SJF's 2 s bound, so the shorter #2 waits behind it: the reason says
    so ("by shortest job first" would be false: #2 is the shorter job)."""
    clock = FakeClock(0.0)
    s = scheduler(max_num_seqs=1, scheduling_policy="sjf", clock=clock)
    s.add(request(0, prompt_len=4, max_tokens=40))
    step(s)  # 0 runs
    s.add(request(1, prompt_len=60, max_tokens=4, arrival_s=0.0))
    clock.t = 2.5
    s.add(request(2, prompt_len=3, max_tokens=4, arrival_s=2.5))
    out = step(s)
    assert say(why(out, 2)) == "behind #1 in the queue: number 2 of 2 by age: #1 waited over 2 s, SJF's bound on starvation"


def test_preempted_to_free_blocks_for_whom_until_it_runs_again():
    s = scheduler(num_blocks=4, block_size=2, max_num_batched_tokens=64)
    for rid, max_tokens in enumerate((2, 5, 5)):
        s.add(request(rid, prompt_len=2, max_tokens=max_tokens))
    step(s)
    out = step(s)  # every decode needs a second block; request 2 (the newest) gives its blocks to 0 and 1
    assert out.preempted == [2] and why(out, 2)["why"] == "preempted_for_blocks"
    assert why(out, 2)["by"] in (0, 1) and say(why(out, 2)).startswith("preempted to free KV blocks for #")
    out = step(s)
    assert 2 not in out.waits and 2 not in s.preempted_why  # running again


def test_preempted_by_a_better_priority():
    s = scheduler(max_num_seqs=1, scheduling_policy="priority")
    s.add(request(0, prompt_len=4, max_tokens=8, priority=0))
    step(s)
    s.add(request(1, prompt_len=4, max_tokens=2, priority=-1))
    out = step(s)
    assert out.preempted == [0]
    assert why(out, 0) == {"why": "preempted_by_priority", "by": 1, "by_priority": -1, "priority": 0,
                           "kv": waits.DROPPED}
    assert say(why(out, 0)) == f"preempted by #1 (priority -1 over 0); {waits.DROPPED}"
    assert kind("preempted_by_priority") == "deferred"


def test_static_waits_for_a_full_batch_then_for_the_batch_in_flight():
    s = scheduler("static", static_batch_size=3)
    s.add(request(0, prompt_len=4, max_tokens=3))
    out = step(s)
    assert why(out, 0) == {"why": "batch_filling", "have": 1, "size": 3}
    assert say(why(out, 0)) == "waiting for a full batch: 1 of 3"
    for rid in (1, 2, 3):
        s.add(request(rid, prompt_len=4, max_tokens=3))
    out = step(s)  # 0, 1 and 2 launch; 3 waits for them
    assert set(out.waits) == {3} and why(out, 3) == {"why": "batch_running", "rows": 3}


def test_dynamic_says_when_it_launches_anyway():
    clock = FakeClock(10.0)
    s = scheduler("dynamic", static_batch_size=4, static_max_wait_s=0.5, clock=clock)
    s.add(request(0, prompt_len=4, arrival_s=10.0))
    w = why(step(s), 0)
    assert w == {"why": "batch_filling", "have": 1, "size": 4, "launch_at_s": 10.5}
    assert say(w, now=10.2) == "waiting for a full batch: 1 of 4 (launches in 0.3 s at the latest)"


def test_the_presenter_launches_a_partial_static_batch():
    s = scheduler("static", static_batch_size=8)
    s.add(request(0, prompt_len=4, max_tokens=2))
    assert step(s).rows == []
    s.launch_now = True
    out = step(s)
    assert [r.request.request_id for r in out.rows] == [0] and not s.launch_now
    s.launch_now = True  # asked of an empty queue: it lapses, the next arrival waits for a full batch
    step(s)
    step(s)
    s.add(request(1, prompt_len=4))
    assert step(s).rows == [] and not s.launch_now


def test_static_head_left_out_for_kv_says_so():
    s = scheduler("static", num_blocks=3, block_size=4, static_batch_size=2)
    s.add(request(0, prompt_len=4, max_tokens=4))   # reserves 2 blocks
    s.add(request(1, prompt_len=4, max_tokens=4))   # 2 more: 1 free
    out = step(s)
    assert why(out, 1) == {"why": "kv_blocks", "need": 2, "free": 1}


def test_a_step_event_carries_only_changes():
    before = {1: {"why": "batch_full"}, 2: {"why": "behind", "rank": 2}}
    after = {2: {"why": "behind", "rank": 1}, 3: {"why": "kv_blocks"}}
    assert changes(before, after) == {1: None, 2: {"why": "behind", "rank": 1}, 3: {"why": "kv_blocks"}}
    assert changes(after, after) == {}
