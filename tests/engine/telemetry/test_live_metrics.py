"""The playground's metric cards: computed from the service's events, equal to the requests' own timings."""
from __future__ import annotations

import time

import pytest

from engine_helpers import greedy
from engine.events import StepMessage
from service_helpers import assert_all_free, service_fixture
from engine.telemetry import live_metrics
from engine.telemetry.live_metrics import LiveMetrics, ratio


svc = service_fixture(strategies=("continuous", "static"), static_batch_size=4)


def test_metrics_match_request_outputs(svc):
    handles = [h for i in range(4) for h in svc.submit([5 + i] * (3 + i), greedy(4 + 2 * i))]
    outs = {(h.lane, h.request_id): h.result(60) for h in handles}
    assert_all_free(svc)
    m = LiveMetrics()
    m.consume(svc.hub)
    summary = m.summary()
    assert set(summary) == {"continuous", "static"}
    for strategy, r in summary.items():
        mine = [o for (s, _), o in outs.items() if s == strategy]
        assert r["completed"] == 4 and r["in_flight"] == 0
        assert r["output_tokens"] == sum(len(o.output_token_ids) for o in mine)
        ttfts = sorted(o.first_token_s - o.arrival_s for o in mine)
        assert r["ttft_p50_s"] == pytest.approx((ttfts[1] + ttfts[2]) / 2)
        steps = [e.event for _, e in svc.hub.read(0).events if isinstance(e, StepMessage) and e.lane == strategy]
        last, waits = {}, []  # each request's gaps between two of its tokens
        for ev in steps:
            waits += [ev.t_end - last[rid] for rid in ev.sampled if rid in last]
            last.update(dict.fromkeys(ev.sampled, ev.t_end))
        assert r["max_token_wait_s"] == pytest.approx(max(waits))  # the longest wait for a next token
    # static pads prompts of 3..6 tokens and keeps finished rows: padding is wasted, continuous has none
    assert summary["static"]["padding_waste_pct"] > 0
    assert summary["continuous"]["padding_waste_pct"] == 0


def test_clear_forgets_the_past(svc):
    svc.submit([5, 6], greedy(2), lanes=["continuous"])[0].result(30)
    m = LiveMetrics(svc.clock(), cleared=True)  # Clear views
    m.consume(svc.hub)
    assert m.summary() == {}
    assert_all_free(svc)


def test_ratio():
    assert ratio(4.0, 2.0) == 2.0 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


def test_a_pause_is_left_out_of_ttft_and_throughput(svc):
    """Paused for 1.5 s with a request waiting: its TTFT on the cards is its TTFT less the pause."""
    m = LiveMetrics(svc.clock(), cleared=True)
    svc.pause()
    hs = [h for i in range(4) for h in svc.submit([5 + i, 6, 7], greedy(3))]  # a full static batch
    time.sleep(1.5)
    svc.resume()
    outs = [h.result(30) for h in hs]
    m.consume(svc.hub)
    paused = m.paused_s(svc.clock())
    assert 1.4 < paused < 2.5
    for lane, r in m.summary().items():
        walls = sorted(o.first_token_s - o.arrival_s for h, o in zip(hs, outs) if h.lane == lane)
        assert walls[0] > 1.4 and r["ttft_p50_s"] == pytest.approx((walls[1] + walls[2]) / 2 - paused, abs=0.02)
    assert_all_free(svc)


def test_a_single_step_while_paused_counts_as_running_time(svc):
    m = LiveMetrics(svc.clock(), cleared=True)
    svc.pause()
    hs = svc.submit([5, 6, 7], greedy(2), lanes=["continuous"])
    time.sleep(0.3)
    svc.step_once()  # the prefill: the first token
    time.sleep(0.6)
    svc.resume()
    out = hs[0].result(30)
    m.consume(svc.hub)
    steps = [e.event for _, e in svc.hub.read(0).events if isinstance(e, StepMessage) and e.lane == "continuous"
             and e.event.t_start >= out.arrival_s]
    first = steps[0]
    # the time before the step was paused; the step itself was not
    assert m.summary()["continuous"]["ttft_p50_s"] == pytest.approx(out.first_token_s - first.t_start, abs=0.02)
    assert_all_free(svc)


def test_a_scenario_run_starts_the_cards_afresh_and_says_which(svc):
    svc.submit([5, 6], greedy(2), lanes=["continuous"])[0].result(30)
    svc.start_run("Straggler")
    hs = [h for i in range(4) for h in svc.submit([5 + i, 6, 7, 8], greedy(3))]
    [h.result(30) for h in hs]
    m = LiveMetrics()
    m.consume(svc.hub)
    assert m.run_title == "Straggler"
    assert {lane: r["completed"] for lane, r in m.summary().items()} == {"continuous": 4, "static": 4}
    assert not m.ended(svc.clock()) and m.ended(svc.clock() + 3.5)  # nothing more came for a while
    cleared = LiveMetrics(svc.clock(), cleared=True)  # Clear views after it: neither the run nor its title
    cleared.consume(svc.hub)
    assert cleared.summary() == {} and cleared.run_title is None
    assert_all_free(svc)


def test_a_summary_shared_by_tabs_is_recomputed_at_most_once_per_max_age(svc, monkeypatch):
    """Every tab refreshes the cards each second: with max_age_s the summary of a stream still going is
    recomputed once per max_age_s however many ask; other SLOs or max_age_s 0 recompute it at once."""
    def one_more(prompt):
        svc.submit(prompt, greedy(2), lanes=["continuous"])[0].result(30)
        m.consume(svc.hub)

    m, now = LiveMetrics(svc.clock(), cleared=True), [100.0]  # (this test's requests only)
    monkeypatch.setattr(live_metrics, "_clock", lambda: now[0])
    one_more([5, 6, 7])
    assert m.summary(max_age_s=0.5)["continuous"]["completed"] == 1
    one_more([8, 9])
    now[0] += 0.4
    assert m.summary(max_age_s=0.5)["continuous"]["completed"] == 1  # events came, but it is 0.4 s old
    now[0] += 0.1
    assert m.summary(max_age_s=0.5)["continuous"]["completed"] == 2
    one_more([10, 11])
    assert m.summary({"continuous": (1.0, None)}, max_age_s=0.5)["continuous"]["completed"] == 3  # other SLOs
    one_more([12, 13])
    assert m.summary({"continuous": (1.0, None)})["continuous"]["completed"] == 4  # no max age
    assert m.summary({"continuous": (1.0, None)}, max_age_s=0.5) is m.summary({"continuous": (1.0, None)})


def test_a_tenants_request_still_running_leaves_the_cards_whole(svc):
    """A room's phone sends a second prompt after its first finished: per-tenant service counts the finished
    requests, and the steps that served the running one (no record yet) are left out, not a KeyError that
    broke the cards and "What to watch" on the projector (seen in a browser test)."""
    since = svc.clock()  # (this test's requests only: the module's others name no tenant)
    svc.submit([5, 6], greedy(2), lanes=["continuous"], tenant="a")[0].result(30)
    running = svc.submit([7, 8], greedy(100), lanes=["continuous"], tenant="b")[0]
    deadline = time.monotonic() + 30
    while True:  # until a step has served it, while it runs
        m = LiveMetrics(since)
        m.consume(svc.hub)
        if any(running.request_id in s.served for s in m.windows["continuous"].steps if s.served):
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    summary = m.summary()["continuous"]
    assert summary["in_flight"] == 1 and list(summary["tenants"]) == ["a"]
    assert summary["tenants"]["a"]["tokens_served"] == 2 + 1  # its prompt, then its first token to make its second
    running.result(60)
    m = LiveMetrics(since)
    m.consume(svc.hub)
    assert m.summary()["continuous"]["tenants"]["b"]["tokens_served"] == 2 + 99
    assert_all_free(svc)
