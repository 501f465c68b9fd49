"""Per-class, per-tenant and prefix-cache benchmark metrics on hand-built records and steps."""
from __future__ import annotations

import pytest

from engine import StepEntry, StepEvent
from engine.telemetry.fairness import backlogged_window, intersect, jain_index, merge, tenant_service
from engine.telemetry.metrics import summarize
from engine.telemetry.records import RequestRecord, StepSample, LaneRun, step_sample
from engine.bench.report import format_table
from engine.bench.workloads import RequestSpec


def _rec(index, arrival, scheduled, first, finish):
    return RequestRecord(index, arrival, scheduled, first, finish, prompt_tokens=4, output_tokens=2,
                         finish_reason="length")


def _step(t_end, served=None, prefill=0, queries=None, hits=None):
    return StepSample(t_end - 0.5, t_end, rows=1, active_rows=1, prefill_tokens=prefill, decode_tokens=1,
                      padding_tokens=0, prefix_queries=queries, prefix_hits=hits, served=served)


def _spec(index, cls=None, tenant=None):
    return RequestSpec(index, 0.0, 2, prompt_len=4, cls=cls, tenant=tenant)


@pytest.mark.parametrize("xs, expected", [([1, 1], 1.0), ([1, 0], 0.5), ([3, 1], 0.8), ([1, 2, 3], 36 / 42),
                                          ([5, 5, 5, 5], 1.0), ([2, 0, 0, 0], 0.25), ([], None), ([0, 0], None)])
def test_jain_index_known_values(xs, expected):
    assert jain_index(xs) == (None if expected is None else pytest.approx(expected))


def test_interval_union_and_intersection():
    assert merge([(3, 5), (0, 1), (1, 2), (4, 6), (7, 7)]) == [(0, 2), (3, 6)]
    assert intersect([(0, 2), (3, 6)], [(1, 4), (5, 9)]) == [(1, 2), (3, 4), (5, 6)]
    assert intersect([(0, 1)], [(1, 2)]) == []


def test_backlogged_window_and_tenant_rates():
    # a waits during [0, 6); b during [2, 3) and [5, 8) -> both backlogged during [2, 3) and [5, 6), 2 s
    recs = [_rec(0, 0, 4, 4.5, 5), _rec(1, 1, 6, 6.5, 7), _rec(2, 2, 3, 3.5, 4), _rec(3, 5, 8, 8.5, 9)]
    tenant_of = {0: "a", 1: "a", 2: "b", 3: "b"}
    assert backlogged_window(recs, tenant_of) == [(2, 3), (5, 6)]
    steps = [_step(1.0, {0: 10}),            # before the window: counted in tokens_served only
             _step(2.5, {1: 4, 2: 4}),       # inside
             _step(3.0, {1: 2, 2: 2}),       # ends at the window's edge: inside
             _step(5.5, {1: 6}),             # inside, a only
             _step(7.0, {3: 9})]             # after
    res = tenant_service(recs, steps, tenant_of)
    assert res["backlogged_s"] == pytest.approx(2.0)
    assert res["tenants"]["a"] == {"requests": 2, "tokens_served": 22, "backlogged_rate": pytest.approx(6.0)}
    assert res["tenants"]["b"] == {"requests": 2, "tokens_served": 15, "backlogged_rate": pytest.approx(3.0)}
    assert res["jain_index"] == pytest.approx(0.9)  # (6 + 3)^2 / (2 * (36 + 9))


def test_one_tenant_or_no_overlap_has_no_index():
    recs = [_rec(0, 0, 1, 1, 2), _rec(1, 3, 4, 4, 5)]
    assert tenant_service(recs, [_step(1.5, {0: 3})], {0: "a", 1: "b"})["jain_index"] is None
    assert tenant_service(recs, [_step(1.5, {0: 3})], {0: "a", 1: "a"})["jain_index"] is None


def test_summary_splits_classes_and_tenants():
    recs = [_rec(0, 0.0, 2.0, 2.0, 6.0), _rec(1, 0.0, 3.0, 3.5, 4.0), _rec(2, 0.0, 1.0, 1.5, 2.0)]
    specs = [_spec(0, "long", "x"), _spec(1, "short", "y"), _spec(2, "short", "y")]
    steps = [_step(1.0, {0: 4}), _step(2.0, {0: 1, 2: 4}), _step(4.0, {0: 1, 1: 5})]
    m = summarize(LaneRun("continuous", recs, steps, 0.0), specs=specs)
    assert m["queue_wait_max_s"] == pytest.approx(3.0)
    assert list(m["classes"]) == ["long", "short"]
    short = m["classes"]["short"]
    assert short["requests"] == 2 and short["queue_wait_max_s"] == pytest.approx(3.0)
    assert short["ttft_p50_s"] == pytest.approx(2.5) and short["e2e_p99_s"] == pytest.approx(2 + 0.99 * 2)
    assert m["classes"]["long"]["ttft_p50_s"] == pytest.approx(2.0)
    assert m["backlogged_s"] == pytest.approx(2.0)  # x waits during [0, 2), y during [0, 3)
    assert m["tenants"]["x"]["tokens_served"] == 6 and m["tenants"]["y"]["backlogged_rate"] == pytest.approx(4 / 2)
    assert m["jain_index"] == pytest.approx(81 / 82)  # rates 2.5 and 2
    plain = summarize(LaneRun("continuous", recs, steps, 0.0), specs=[_spec(i) for i in range(3)])
    assert "classes" not in plain and "tenants" not in plain and "jain_index" not in plain
    peer = summarize(LaneRun("hf-generate", recs, [_step(1.0)], 0.0), specs=specs)
    assert "classes" in peer and "tenants" not in peer  # no per-request service recorded


def test_prefix_metrics():
    steps = [_step(1.0, prefill=500, queries=600, hits=480), _step(2.0, prefill=20, queries=0, hits=0),
             _step(3.0, queries=40, hits=0)]
    m = summarize(LaneRun("continuous", [_rec(0, 0, 0, 1, 3)], steps, 0.0))
    assert m["prefill_tokens"] == 520 and m["prefix_queries"] == 640 and m["prefix_hits"] == 480
    assert m["prefix_hit_rate"] == pytest.approx(0.75)
    peer = summarize(LaneRun("hf-generate", [_rec(0, 0, 0, 1, 3)], [_step(1.0, prefill=9)], 0.0))
    assert peer["prefill_tokens"] == 9 and peer["prefix_hit_rate"] is None and peer["prefix_queries"] is None


def test_step_sample_reads_prefix_counters_and_service():
    # request 7 admitted with 32 of its 40 prompt tokens cached computes 8; request 9 decodes one
    ev = StepEvent(step=3, strategy="continuous", t_start=1.0, t_end=1.5, num_waiting=0, num_running=2,
                   entries=[StepEntry(7, "prefill", 8, 40, 0, cached_tokens=32), StepEntry(9, "decode", 1, 12, 1)],
                   admitted=[7], finished=[], preempted=[], tokens_used=9, token_budget=512, num_blocks=8,
                   block_size=16, used_blocks=4, block_tables={}, kv_tokens={}, reserved_unused_slots=12,
                   prefix_queries=40, prefix_hits=32)
    s = step_sample(ev, {7: 0, 9: 1})
    assert (s.prefill_tokens, s.decode_tokens, s.prefix_queries, s.prefix_hits) == (8, 1, 40, 32)
    assert s.served == {0: 8, 1: 1}
    assert step_sample(ev).served is None


def test_speculative_decoding_metrics_from_step_events():
    """Acceptance and tokens gained per decode row and step, from the entries' drafted / accepted; the
    report shows them only when a lane drafts."""
    def ev(entries, t):
        return StepEvent(step=1, strategy="continuous", t_start=t, t_end=t + 0.1, num_waiting=0, num_running=2,
                         entries=entries, admitted=[], finished=[], preempted=[], tokens_used=1, token_budget=512,
                         num_blocks=8, block_size=16, used_blocks=2, block_tables={}, kv_tokens={},
                         reserved_unused_slots=0)
    steps = [step_sample(ev([StepEntry(1, "decode", 5, 20, drafted=4, accepted=3), StepEntry(2, "decode", 1, 9)], 1.0)),
             step_sample(ev([StepEntry(1, "decode", 3, 24, drafted=2, accepted=0)], 2.0))]
    m = summarize(LaneRun("continuous", [_rec(0, 0, 0, 1, 3)], steps, 0.0))
    assert (m["draft_tokens"], m["accepted_tokens"]) == (6, 3)
    assert m["acceptance_rate"] == pytest.approx(0.5)
    assert m["tokens_per_decode_row"] == pytest.approx((3 + 3) / 3)  # 3 decode row-steps gained 6 tokens
    peer = summarize(LaneRun("hf-generate", [_rec(0, 0, 0, 1, 3)], [_step(1.0, prefill=9)], 0.0))
    assert peer["acceptance_rate"] is None and peer["tokens_per_decode_row"] is None
    drafting = format_table([_row("off", False), _row("ngram", False, acceptance_rate=0.5, tokens_per_decode_row=2.0,
                                                      info={"speculative": "ngram"})])
    assert "accept %" in drafting and "50.0" in drafting and "2.00" in drafting
    assert "accept %" not in format_table([_row("a", False)])


def _row(lane, caching, **extra):
    return {"lane": lane, "strategy": "continuous", "rate": None, "workload": "w", "output_tokens_per_s": 1.0,
            "prefill_tokens": 1234, "prefix_hit_rate": 0.5 if caching else None,
            "info": {"prefix_caching": caching}, **extra}  # extra may replace info


def test_report_shows_sections_only_when_they_apply():
    plain = format_table([_row("a", False), _row("b", False)])
    assert "prefill tok" not in plain and "per class" not in plain and "Jain" not in plain
    cached = format_table([_row("off", False), _row("on", True)])
    assert "prefill tok" in cached and "50.0" in cached and "per class" not in cached
    classes = {"short": {"requests": 3, "ttft_p50_s": 0.25, "queue_wait_max_s": 1.5}}
    tenants = {"flood": {"requests": 8, "tokens_served": 900, "backlogged_rate": 30.0},
               "few": {"requests": 2, "tokens_served": 100, "backlogged_rate": 10.0}}
    text = format_table([_row("fcfs", False, classes=classes, tenants=tenants, jain_index=0.8, backlogged_s=3.0)])
    assert "per class" in text and "0.25s" in text and "1.50s" in text
    assert "flood tok/s" in text and "few tok" in text and "0.800" in text and "3.0s" in text
