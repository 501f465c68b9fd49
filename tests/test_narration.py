"""Narration (engine/narration) on hand-built event sequences, and on a real tiny-model run."""
from __future__ import annotations

import pytest

from engine import SamplingParams
from engine.events import DECODE, PADDING, PREFILL, StepEntry, StepMessage
from engine.narration import Narrator
from engine.telemetry import StepEvent
from service_helpers import assert_all_free, make_service, wait_idle


def step(n, entries, strategy="continuous", admitted=(), finished=(), preempted=(), used=4, blocks=16,
         dt=1.0) -> StepEvent:
    return StepEvent(step=n, strategy=strategy, t_start=n * dt, t_end=n * dt + 0.25, entries=list(entries),
                     num_waiting=0, num_running=len(entries), admitted=list(admitted), finished=list(finished),
                     preempted=list(preempted), tokens_used=0, token_budget=256, num_blocks=blocks, block_size=16,
                     used_blocks=used, block_tables={}, kv_tokens={}, reserved_unused_slots=0)


def request(rid, lane, t=0.0, prompt=16, max_tokens=8, tenant=None, priority=0) -> dict:
    return {"type": "request", "lane": lane, "strategy": "continuous", "request_id": rid, "arrival_s": t,
            "num_prompt_tokens": prompt, "max_tokens": max_tokens, "tenant": tenant, "priority": priority}


def finished(rid, lane, t) -> dict:
    return {"type": "finished", "lane": lane, "strategy": "continuous", "request_id": rid, "finish_s": t,
            "arrival_s": 0.0}


def told(items, gap=0.0, now=None) -> list[str]:
    n = Narrator(min_gap_s=gap)
    for item in items:
        n.feed(item)
    return [s.text for s in n.recent(100, now=now)][::-1]


def stepped(ev, lane="a"):
    return StepMessage(event=ev, lane=lane, strategy=ev.strategy).hub_item()


D = lambda rid, ctx=20: StepEntry(rid, DECODE, 1, ctx)  # noqa: E731


def test_a_finished_slot_goes_to_a_waiting_request_in_the_same_iteration():
    items = [request(3, "a"), request(9, "a", t=0.1), stepped(step(1, [StepEntry(3, PREFILL, 16, 16)], admitted=[3])),
             stepped(step(42, [StepEntry(9, PREFILL, 16, 16)], admitted=[9], finished=[3]))]
    assert "iteration 42: #3 finished and #9 took the free slot in the same iteration" in told(items)


def test_static_rows_of_finished_requests_are_padding():
    rows = [StepEntry(i, PADDING, 0, 20, i) for i in range(5)] + [D(5), D(6), D(7)]
    items = [*(request(i, "static") for i in range(8)), *(finished(i, "static", 0.5) for i in range(5)),
             stepped(step(7, rows, strategy="static"), lane="static")]
    assert told(items)[-1] == ("iteration 7: #0, #1 and 3 more finished but their rows are still computed; "
                               "5 of 8 rows are padding")


def test_preemption_and_recompute():
    both = [StepEntry(5, PREFILL, 16, 16), StepEntry(6, PREFILL, 16, 16)]
    items = [request(5, "a"), request(6, "a"), stepped(step(1, both, admitted=[5, 6])),
             stepped(step(2, [D(5, 17)], preempted=[6], used=16)),
             stepped(step(3, [StepEntry(6, PREFILL, 17, 17)], admitted=[6]))]
    said = told(items)
    assert "iteration 2: the KV pool is full (16 of 16 blocks): #6 was preempted" in said[-2]
    assert said[-1] == ("iteration 3: #6 is back after its preemption: recomputing 17 tokens it had already "
                        "computed once")


def test_prefix_hit_and_chunked_prefill():
    items = [request(7, "a", prompt=416), request(5, "a", prompt=1500), request(1, "a"),
             stepped(step(1, [D(1), StepEntry(7, PREFILL, 16, 416, cached_tokens=400)], admitted=[7])),
             stepped(step(2, [D(1), D(7), StepEntry(5, PREFILL, 256, 256)], admitted=[5]))]
    said = told(items)
    assert said[0] == ("iteration 1: #7 took 400 of its 416 prompt tokens from the prefix cache and prefills "
                       "only the rest")
    assert said[1] == ("iteration 2: #5's 1,500-token prompt is being prefilled in 256-token chunks while 2 "
                       "requests keep decoding")


def test_a_whole_long_prefill_stalls_the_decodes():
    items = [request(1, "a"), request(5, "a", prompt=1500),
             stepped(step(2, [D(1), StepEntry(5, PREFILL, 1500, 1500)], admitted=[5]))]
    assert told(items) == ["iteration 2: #5's 1,500-token prompt was prefilled whole in one 250 ms iteration: "
                           "1 decoding request waited that long for the next token"]


@pytest.mark.parametrize("policy,why", [("sjf", "it asks 3 tokens, #2 64 (shortest job first)"),
                                        ("fair", "its tenant few had fewer requests running"),
                                        ("priority", "its priority -1 is more urgent")])
def test_a_jump_says_why_in_the_policy_s_terms(policy, why):
    lanes = {"type": "lanes", "lanes": {"a": {"strategy": "continuous", "scheduling_policy": policy}}}
    items = [lanes, request(2, "a", t=0.0, max_tokens=64, tenant="flood"),
             request(8, "a", t=0.5, max_tokens=3, tenant="few", priority=-1),
             stepped(step(4, [StepEntry(8, PREFILL, 16, 16)], admitted=[8]))]
    (sentence,) = told(items)
    assert sentence.startswith("iteration 4: #8 started ahead of #2, which arrived earlier: ") and why in sentence


def test_pace_keeps_the_most_interesting_sentence_per_gap():
    # one sentence per 2 s per lane: iteration 0 is said; of iterations 1 and 2 (within 2 s of it) only
    # the preemption (the most interesting) is, at iteration 2; the slot reuse of iteration 1 is not
    items = [request(1, "a"), request(2, "a"), request(3, "a"),
             stepped(step(0, [StepEntry(1, PREFILL, 16, 16)], admitted=[1], preempted=[9])),
             stepped(step(1, [StepEntry(2, PREFILL, 16, 16)], admitted=[2], finished=[1])),
             stepped(step(2, [D(2)], preempted=[3]))]
    said = told(items, gap=2.0)
    assert len(said) == 2 and said[0].startswith("iteration 0:") and said[1].startswith("iteration 2:")
    assert "#3 was preempted" in said[1] and not any("took the free slot" in t for t in said)


def test_a_lane_s_run_ends_after_a_quiet_moment_and_lanes_are_compared():
    items = [request(1, "fast", 0.0), request(1, "slow", 0.0), request(2, "fast", 0.1), request(2, "slow", 0.1),
             finished(1, "fast", 1.0), finished(2, "fast", 2.0),
             request(3, "fast", 2.5), request(3, "slow", 2.5), finished(3, "fast", 3.0),  # a gap, same run
             finished(1, "slow", 4.0), finished(2, "slow", 5.0), finished(3, "slow", 6.0)]
    assert told(items) == ["finished all 3 requests in 3.0 s"]  # fast: ended by slow's later events
    assert told(items, now=9.5)[-2:] == ["finished all 3 requests in 6.0 s",
                                         "slow needed 2.0x the time fast took for the same 3 requests"]


def test_remote_lanes_and_service_events_are_skipped():
    assert told([{"type": "status", "event": "paused"}, {**request(1, "far"), "strategy": "remote"}]) == []


# ---- a real run --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def svc(tiny_model_dirs):
    # a pool of 32 blocks of 4 tokens: the 6 requests (56 blocks in all) cannot all hold their KV at
    # once on continuous; static reserves each batch of 3 up front (28 blocks)
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous", "static"), num_kv_blocks=32,
                     max_model_len=96, static_batch_size=3)
    yield s
    s.stop()


def test_a_real_run_is_narrated(svc):
    for i in range(6):  # one long answer per static batch
        svc.submit(list(range(20 + i, 44 + i)), SamplingParams(max_tokens=28 if i % 3 == 0 else 6,
                                                              temperature=0.0, ignore_eos=True))
    wait_idle(svc, 120)
    n = Narrator(min_gap_s=0.0)
    n.consume(svc.hub)
    said = [(s.lane, s.text) for s in n.recent(200, now=svc.clock() + 10)][::-1]
    text = " | ".join(t for _, t in said)
    assert any(lane == "continuous" and "preempted" in t for lane, t in said), text
    assert any(lane == "static" and "rows are padding" in t or "row is still computed" in t for lane, t in said), text
    assert ("continuous", "finished all 6 requests in" ) in [(lane, t[:26]) for lane, t in said], text
    assert_all_free(svc)
