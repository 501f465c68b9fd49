"""Narration (engine/workshop/narration) on hand-built event sequences, and on a real tiny-model run. Every
sentence produced here is also checked against its events by tests/narration_checker.py."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from engine import SamplingParams
from engine.event_hub import EventHub
from engine.events import (DECODE, PADDING, PREFILL, SWAP_IN, SWAP_OUT, LanesEvent, StatusEvent, StepEntry, StepEvent,
                           StepMessage, WaitsEvent)
from engine.workshop.narration import Narrator, Sentence
from engine.scheduler import waits
from event_factories import finished_event, request_event
from narration_checker import check
from service_helpers import assert_all_free, service_fixture, wait_idle


def step(n, entries, strategy="continuous", admitted=(), finished=(), preempted=(), used=4, blocks=16,
         dt=1.0, why=None, swaps=()) -> StepEvent:
    return StepEvent(step=n, strategy=strategy, t_start=n * dt, t_end=n * dt + 0.25, entries=list(entries),
                     num_waiting=0, num_running=len(entries), admitted=list(admitted), finished=list(finished),
                     preempted=list(preempted), tokens_used=0, token_budget=256, num_blocks=blocks, block_size=16,
                     used_blocks=used, block_tables={}, kv_tokens={}, reserved_unused_slots=0, waits=why or {},
                     swaps=[list(s) for s in swaps], num_host_blocks=8 if swaps else 0)


request, finished = request_event, finished_event


def lanes(policy="fcfs", max_num_seqs=2, lane="a", strategy="continuous") -> LanesEvent:
    return LanesEvent(lanes={lane: {"strategy": strategy, "scheduling_policy": policy, "max_num_seqs": max_num_seqs}})


def told(items, gap=0.0, now=None, start=0) -> list[str]:
    """What a narrator reading items[start:] says, every sentence checked true against the events."""
    n = Narrator(min_gap_s=gap, keep=1000, cursor=start)  # as if it read a hub from there
    for item in items[start:]:
        n.on_event(item)
    said = n.recent(1000, now=now)[::-1]
    assert check(items, said, start) == []
    return [s.text for s in said]


def stepped(ev, lane="a"):
    return StepMessage(event=ev, lane=lane, strategy=ev.strategy)


D = lambda rid, ctx=20: StepEntry(rid, DECODE, 1, ctx)  # noqa: E731
P = lambda rid, n=16: StepEntry(rid, PREFILL, n, n)  # noqa: E731


def full_batch_then(third: StepEvent, max_num_seqs=2, arrival=0.2) -> list[dict]:
    """#1 and #2 fill a batch of 2; #1 finishes in iteration 2; `third` follows."""
    return [lanes(max_num_seqs=max_num_seqs), request(1, "a"), request(2, "a", t=0.1), request(3, "a", t=arrival),
            stepped(step(1, [P(1), P(2)], admitted=[1, 2])), stepped(step(2, [D(1), D(2)], finished=[1])),
            finished(1, "a", 2.25), stepped(third)]


def test_a_freed_slot_goes_at_once_to_a_waiting_request():
    items = full_batch_then(step(3, [D(2), P(3)], admitted=[3]))
    assert told(items)[-1] == "iteration 3: #3 took the slot #1 freed in the previous iteration"


@pytest.mark.parametrize("case", ["not the next iteration", "batch had room", "max_num_seqs unknown",
                                  "arrived after it was freed"])
def test_no_slot_is_credited_unless_the_batch_was_full_just_before(case):
    third = step(5 if case == "not the next iteration" else 3, [D(2), P(3)], admitted=[3])
    items = full_batch_then(third, max_num_seqs=3 if case == "batch had room" else 2,
                            arrival=2.5 if case == "arrived after it was freed" else 0.2)
    if case == "max_num_seqs unknown":
        items = items[1:]
    assert told(items)[-1] == f"iteration {third.step}: #3 joined the running batch while 1 request kept decoding"


def test_a_request_admitted_in_the_iteration_another_finishes_did_not_take_its_slot():
    # admission comes before the forward pass that finishes #1: #3 joined a batch that had room
    items = [lanes(max_num_seqs=3), request(1, "a"), request(2, "a", t=0.1), request(3, "a", t=0.2),
             stepped(step(1, [P(1), P(2)], admitted=[1, 2])),
             stepped(step(2, [D(1), D(2), P(3)], admitted=[3], finished=[1]))]
    assert told(items) == ["iteration 2: #3 joined the running batch while 2 requests kept decoding"]


def test_a_freed_slot_is_credited_once_and_only_to_requests_seen_arriving():
    items = [*full_batch_then(step(3, [D(2), P(3)], admitted=[3], finished=[2])), request(4, "a", t=0.3),
             stepped(step(4, [D(3), P(4)], admitted=[4]))]
    assert told(items)[-2:] == ["iteration 3: #3 took the slot #1 freed in the previous iteration",
                                "iteration 4: #4 took the slot #2 freed in the previous iteration"]
    start = items.index(request(3, "a", t=0.2))  # "Clear views" after #1 and #2 arrived: they are never named
    assert told(items, start=start) == ["iteration 3: #3 joined the running batch while 1 request kept decoding",
                                        "iteration 4: #4 joined the running batch while 1 request kept decoding"]


def test_static_rows_of_finished_requests_are_padding():
    rows = [StepEntry(i, PADDING, 0, 20, i) for i in range(5)] + [D(5), D(6), D(7)]
    items = [*(request(i, "static") for i in range(8)), *(finished(i, "static", 0.5) for i in range(5)),
             stepped(step(7, rows, strategy="static"), lane="static")]
    assert told(items)[-1] == ("iteration 7: #0, #1 and 3 more finished but their rows are still computed; "
                               "5 of 8 rows are padding")
    # a narrator that never saw #0 to #3 arrive names only #4; the count of padding rows stays the event's
    assert told(items, start=4)[-1] == "iteration 7: #4 finished but its row is still computed; 5 of 8 rows are padding"


def test_preemption_and_recompute():
    both = [P(5), P(6)]
    items = [request(5, "a"), request(6, "a"), stepped(step(1, both, admitted=[5, 6])),
             stepped(step(2, [D(5, 17)], preempted=[6], used=16, why={6: waits.preempted_for_blocks(5)})),
             stepped(step(3, [P(6, 17)], admitted=[6]))]
    assert told(items)[-2:] == [
        "iteration 2: the KV pool ran out of blocks: #6 was preempted to free its blocks for #5; it will recompute "
        "its tokens later",
        "iteration 3: #6 is back after its preemption: it recomputes the 16 tokens it had already computed once"]


def test_swap_preemption_and_the_swap_back():
    """preemption_mode="swap": the KV goes to the host pool and comes back; nothing is recomputed (the
    resumed request may go on with a prefill chunk it had not reached)."""
    items = [request(5, "a"), request(6, "a"), stepped(step(1, [P(5), P(6, 16)], admitted=[5, 6])),
             stepped(step(2, [D(5, 17)], preempted=[6], used=16, swaps=[(6, SWAP_OUT, 1)],
                          why={6: {**waits.preempted_for_blocks(5), "kv": waits.SWAPPED}})),
             stepped(step(3, [P(6, 17)], admitted=[6], swaps=[(6, SWAP_IN, 1)]))]
    assert told(items)[-2:] == [
        "iteration 2: the KV pool ran out of blocks: #6 was preempted to free its blocks for #5; its KV was copied "
        "to the host pool, to come back when it resumes",
        "iteration 3: #6 is back after its preemption: its 1 KV block came back from the host pool, nothing "
        "recomputed"]
    full = {6: {**waits.preempted_for_blocks(5), "kv": waits.DROPPED_HOST_FULL}}
    items[3] = stepped(step(2, [D(5, 17)], preempted=[6], used=16, why=full))
    assert told(items)[-2].endswith("#5; the host pool is full: it will recompute its tokens later")


def test_the_slo_policy_passing_late_requests_is_explained():
    """slo: a request that can still make its TTFT deadline starts ahead of earlier ones already past theirs."""
    lanes_ev = LanesEvent(lanes={"a": {"strategy": "continuous", "scheduling_policy": "slo", "max_num_seqs": 1,
                                       "slo_ttft_s": 2.0}})
    items = [lanes_ev, request(1, "a", t=0.1), request(2, "a", t=0.2), request(3, "a", t=2.5),
             stepped(step(3, [P(3)], admitted=[3]))]
    assert told(items)[-1] == ("iteration 3: #3 started ahead of 2 requests that arrived earlier: all 2 are past "
                               "the 2 s TTFT deadline after arriving, and the slo policy serves late requests last")
    items[3] = request(3, "a", t=0.5)  # at 1 s nobody is late yet: no reason of the slo policy to give
    items[4] = stepped(step(1, [P(3)], admitted=[3]))
    assert not [t for t in told(items) if "started ahead" in t]


def test_a_preemption_by_priority_names_only_what_the_narrator_saw():
    why = {7: waits.preempted_by_priority(9, -1, 0)}
    items = [request(7, "a"), request(9, "a", priority=-1), stepped(step(1, [P(7)], admitted=[7])),
             stepped(step(2, [P(9)], admitted=[9], preempted=[7], why=why))]
    assert told(items)[-1] == ("iteration 2: #7 was preempted by #9 (priority -1 over 0); it will recompute its "
                               "tokens later")
    assert told(items[1:]) == []  # #7 arrived before this narrator started


def test_prefix_hit_and_chunked_prefill():
    items = [request(7, "a", prompt=416), request(5, "a", prompt=1500), request(1, "a"),
             stepped(step(1, [D(1), StepEntry(7, PREFILL, 16, 416, cached_tokens=400)], admitted=[7])),
             stepped(step(2, [D(1), D(7), StepEntry(5, PREFILL, 256, 256)], admitted=[5]))]
    said = told(items)
    assert said[0] == ("iteration 1: #7 took 400 of its 416 prompt tokens from the prefix cache and prefills "
                       "only the rest")
    assert said[1] == ("iteration 2: #5's 1,500-token prompt is prefilled a chunk at a time: 256 tokens this "
                       "iteration, while 2 requests keep decoding")


def test_a_whole_long_prefill_stalls_the_decodes():
    items = [request(1, "a"), request(5, "a", prompt=1500),
             stepped(step(2, [D(1), StepEntry(5, PREFILL, 1500, 1500)], admitted=[5]))]
    assert told(items) == ["iteration 2: #5's 1,500-token prompt was prefilled whole in one 250 ms iteration: "
                           "1 decoding request waited that long for the next token"]


@pytest.mark.parametrize("policy,why", [
    ("sjf", "it is the shorter job: 19 tokens of prompt and answer against 80 for #2 (shortest job first)"),
    ("fair", "its tenant few goes before #2's tenant flood (fair share per tenant)"),
    ("priority", "its priority -1 is more urgent than #2's 0 (lower runs first)")])
def test_a_jump_says_why_in_the_policy_s_terms(policy, why):
    items = [lanes(policy), request(2, "a", t=0.0, max_tokens=64, tenant="flood"),
             request(8, "a", t=0.5, max_tokens=3, tenant="few", priority=-1),
             stepped(step(4, [StepEntry(8, PREFILL, 16, 16)], admitted=[8]))]
    assert told(items) == [f"iteration 4: #8 started ahead of #2, which arrived earlier: {why}"]


def test_pace_keeps_the_most_interesting_sentence_per_gap():
    # one sentence per 2 s per lane: iteration 1 is said; of iterations 2 to 4 only the preemption (the most
    # interesting) is, at iteration 4 (2.1 s later); the slot reuse of iteration 3 is not
    hit = StepEntry(2, PREFILL, 4, 16, cached_tokens=12)
    items = [lanes(max_num_seqs=2), request(1, "a"), request(2, "a"), request(3, "a"),
             stepped(step(1, [P(1), hit], admitted=[1, 2], dt=0.7)),
             stepped(step(2, [D(1), D(2)], finished=[1], dt=0.7)),
             stepped(step(3, [D(2), P(3)], admitted=[3], dt=0.7)),
             stepped(step(4, [D(2)], preempted=[3], why={3: waits.preempted_for_blocks(2)}, dt=0.7))]
    said = told(items, gap=2.0)
    assert len(said) == 2 and said[0].startswith("iteration 1: #2 took 12 of its 16 prompt tokens")
    assert said[1].startswith("iteration 4: the KV pool ran out of blocks: #3 was preempted")


def test_a_lane_s_run_ends_after_a_quiet_moment_and_lanes_are_compared():
    items = [request(1, "fast", 0.0), request(1, "slow", 0.0), request(2, "fast", 0.1), request(2, "slow", 0.1),
             finished(1, "fast", 1.0), finished(2, "fast", 2.0),
             request(3, "fast", 2.5), request(3, "slow", 2.5), finished(3, "fast", 3.0),  # a gap, same run
             finished(1, "slow", 4.0), finished(2, "slow", 5.0), finished(3, "slow", 6.0)]
    assert told(items) == ["finished all 3 requests in 3.0 s"]  # fast: ended by slow's later events
    assert told(items, now=9.5)[-2:] == ["finished all 3 requests in 6.0 s",
                                         "slow needed 2.0x the time fast took for the same 3 requests"]


def test_runs_are_compared_only_on_the_same_requests_and_counted_only_when_all_were_seen():
    other = [replace(item, request_id=item.request_id + 10) if item.lane == "slow" else item
             for item in [request(1, "fast", 0.0), request(1, "slow", 0.0), request(2, "fast", 0.1),
                          request(2, "slow", 0.1), finished(1, "fast", 1.0), finished(2, "fast", 2.0),
                          finished(1, "slow", 4.0), finished(2, "slow", 5.0)]]
    assert told(other, now=9.0) == ["finished all 2 requests in 2.0 s", "finished all 2 requests in 5.0 s"]
    # a narrator started after #1 arrived: the runs' totals are unknown, so nothing is said
    midway = [request(1, "a", 0.0), request(2, "a", 0.1), stepped(step(1, [P(1)], admitted=[1])),
              stepped(step(2, [D(1), P(2)], admitted=[2], finished=[1])), finished(1, "a", 2.25),
              stepped(step(3, [D(2)], finished=[2])), finished(2, "a", 3.25)]
    assert told(midway, now=9.0)[-1] == "finished all 2 requests in 3.2 s"
    assert not any(t.startswith("finished") for t in told(midway, now=9.0, start=1))


def test_a_long_wait_for_a_full_static_batch():
    filling = {3: waits.batch_filling(1, 4)}
    items = [lanes(lane="s", strategy="static"), request(3, "s", t=1.0, strategy="static"),
             WaitsEvent(lane="s", strategy="static", t=1.01, waits={"3": filling[3]})]
    assert told(items, now=8.2) == ["#3 has waited 7 s, waiting for a full batch: 1 of 4: this lane launches only "
                                    "full batches; the presenter can launch this one now (Launch)"]
    dynamic = [lanes(lane="s", strategy="dynamic"), *(replace(item, strategy="dynamic") for item in items[1:])]
    assert told(dynamic, now=8.2) == []  # a dynamic batch launches by itself


def test_remote_lanes_and_service_events_are_skipped():
    assert told([StatusEvent(event="paused"), request(1, "far", strategy="remote")]) == []


def test_a_narrator_that_fell_behind_the_hub_forgets_what_it_knew():
    hub = EventHub(capacity=4)
    for item in full_batch_then(step(3, [D(2), P(3)], admitted=[3]))[:4]:  # lanes and #1 to #3 arrive
        hub.publish(item)
    n = Narrator(min_gap_s=0.0)
    n.consume(hub)
    for item in [StatusEvent(event="paused"), *full_batch_then(step(3, [D(2), P(3)], admitted=[3]))[4:]]:
        hub.publish(item)  # one more than the hub keeps
    n.consume(hub)
    assert n.recent() == [] and n.lanes["a"].max_num_seqs == 2  # #3 is unknown now; the lane's settings stay


def test_a_row_that_gains_several_tokens_from_its_drafts():
    """Speculative decoding: the row that gained the most from its drafts, once it gained 3 or more."""
    items = [request(1, "a"), request(3, "a"), stepped(step(1, [StepEntry(1, DECODE, 3, 30, drafted=2, accepted=1),
                                                             StepEntry(3, DECODE, 5, 40, drafted=4, accepted=3)])),
             stepped(step(2, [StepEntry(1, DECODE, 2, 32, drafted=1, accepted=1), D(3, 44)]))]
    assert told(items) == ["iteration 1: #3 accepted 3 of 4 drafted tokens: 4 tokens in one step"]
    assert check(items, [said(1, "#3 accepted 4 of 4 drafted tokens: 5 tokens in one step")])
    assert check(items, [said(2, "#3 accepted 3 of 4 drafted tokens: 4 tokens in one step")])


def said(n: int, text: str, lane: str = "a") -> Sentence:
    return Sentence(n + 0.25, lane, n, f"iteration {n}: {text}")


@pytest.mark.parametrize("false", [
    [said(3, "#1 finished and #3 took the free slot in the same iteration")],  # no template says that
    [said(3, "#3 took the slot #2 freed in the previous iteration")],          # #2 finished later
    [said(3, "#3 took the slots #1 and #2 freed in the previous iteration")],
    [said(4, "#4 took the slot #1 freed in the previous iteration")],          # not the previous iteration
    [said(3, "#3 took the slot #1 freed in the previous iteration")] * 2,       # credited twice
    [said(4, "#9 joined the running batch while 1 request kept decoding")],   # never seen arriving
    [said(4, "#4 joined the running batch while 2 requests kept decoding")],  # one decodes
    [said(5, "#4 joined the running batch while 1 request kept decoding")],   # no iteration 5
    [said(4, "#3 finished but its row is still computed; 1 of 2 rows is padding")],
    [said(4, "the KV pool ran out of blocks: #3 was preempted to free its blocks; it will recompute its tokens "
             "later")],
    [Sentence(9.0, "a", None, "finished all 4 requests in 4.0 s")],
])
def test_the_checker_finds_false_sentences(false):
    items = [*full_batch_then(step(3, [D(2), P(3)], admitted=[3], finished=[2])), finished(2, "a", 3.25),
             request(4, "a", t=0.3), stepped(step(4, [D(3), P(4)], admitted=[4]))]
    assert told(items) and check(items, false)


def test_the_checker_compares_only_runs_of_the_same_requests():
    items = [request(1, "fast", 0.0), request(2, "slow", 0.0), finished(1, "fast", 1.0), finished(2, "slow", 2.0)]
    runs = [Sentence(1.0, "fast", None, "finished its 1 request in 1.0 s"),
            Sentence(2.0, "slow", None, "finished its 1 request in 2.0 s")]
    assert check(items, runs) == []
    compared = Sentence(2.0, None, None, "slow needed 2.0x the time fast took for the same 1 requests")
    assert check(items, [*runs, compared])  # not the same request: #1 on fast, #2 on slow


# ---- a real run --------------------------------------------------------------------------------
# a pool of 32 blocks of 4 tokens: the 6 requests (56 blocks in all) cannot all hold their KV at once on
# continuous; static reserves each batch of 3 up front (28 blocks)
svc = service_fixture(strategies=("continuous", "static"), num_kv_blocks=32, max_model_len=96, static_batch_size=3)


def test_a_real_run_is_narrated(svc):
    cursor = svc.hub.head
    n = Narrator(min_gap_s=0.0, keep=1000, cursor=cursor)  # as the UI's after Clear views, which reads the clock every second:
    n.recent(now=svc.clock())         # what came before is unknown, nothing came since
    svc.pause()  # all six queue at once, however slow the machine
    for i in range(6):  # one long answer per static batch
        svc.submit(list(range(20 + i, 44 + i)), SamplingParams(max_tokens=28 if i % 3 == 0 else 6,
                                                              temperature=0.0, ignore_eos=True))
    svc.resume()
    wait_idle(svc, 120)
    time.sleep(0.1)  # the last `finished` events follow the lanes going idle
    n.consume(svc.hub)
    said = n.recent(1000, now=svc.clock() + 10)[::-1]
    assert check([item for _, item in svc.hub.read(0).events], said, start=cursor) == []
    text = " | ".join(s.text for s in said)
    assert any(s.lane == "continuous" and "preempted" in s.text for s in said), text
    assert any(s.lane == "static" and "still computed" in s.text for s in said), text
    assert any(s.lane == "continuous" and s.text.startswith("finished all 6 requests in") for s in said), text
    assert_all_free(svc)
