"""Metric math on hand-built traces: known TTFT, TPOT, latency, waste, batch size and goodput."""
from __future__ import annotations

import numpy as np
import pytest

from engine import RequestOutput, StepEntry, StepEvent
from engine.telemetry.metrics import summarize
from engine.bench.peers import generate_steps
from engine.telemetry.records import LaneRun, request_record, step_sample
from engine.bench.report import add_ratios, format_table, speedup
from engine.bench.workloads import RequestSpec
from engine_helpers import greedy, make_engine


def _event(step, t0, t1, entries, used_blocks, unused, block_size=4):
    return StepEvent(step=step, strategy="static", t_start=t0, t_end=t1,
                     entries=[StepEntry(*e) for e in entries], num_waiting=0, num_running=2, admitted=[],
                     finished=[], preempted=[], tokens_used=0, token_budget=64, num_blocks=10,
                     block_size=block_size, used_blocks=used_blocks, block_tables={}, kv_tokens={},
                     reserved_unused_slots=unused)


def _output(rid, arrival, first, finish, n_out, prompt_len=6):
    return RequestOutput(request_id=rid, prompt_token_ids=[5] * prompt_len, output_token_ids=[7] * n_out, text="",
                         finish_reason="length", arrival_s=arrival, first_token_s=first, finish_s=finish)


@pytest.fixture
def hand_run() -> LaneRun:
    # A: arrives at 0, first token 0.5, finishes 1.5 with 5 tokens  -> TTFT 0.5, TPOT 0.25, e2e 1.5
    # B: arrives at 0.2, scheduled 0.5, first 1.0, finishes 3.0 with 3 tokens -> TTFT 0.8, TPOT 1.0, e2e 2.8
    t0 = 100.0
    outs = [_output(0, t0, t0 + 0.5, t0 + 1.5, 5), _output(1, t0 + 0.2, t0 + 1.0, t0 + 3.0, 3, prompt_len=3)]
    records = [request_record(0, outs[0], t0), request_record(1, outs[1], t0 + 0.5)]
    events = [
        # prefill of A (6 tokens) padded by 2; 2 blocks of 4 = 8 slots, 2 unused
        _event(0, t0, t0 + 0.5, [(0, "prefill", 6, 6), (0, "padding", 2, 6)], used_blocks=2, unused=2),
        # A decodes, B prefills 3; 12 slots, 3 unused
        _event(1, t0 + 0.5, t0 + 1.0, [(0, "decode", 1, 7), (1, "prefill", 3, 3)], used_blocks=3, unused=3),
        # nothing scheduled: not a busy step
        _event(2, t0 + 1.0, t0 + 1.0, [], used_blocks=3, unused=3),
        # A has finished but its row is still computed; B decodes; 12 slots, 6 unused
        _event(3, t0 + 1.0, t0 + 1.5, [(0, "padding", 1, 7), (1, "decode", 1, 4)], used_blocks=3, unused=6),
    ]
    steps = [s for s in map(step_sample, events) if s is not None]
    assert len(steps) == 3
    return LaneRun("static", records, steps, t0)


def test_latency_and_throughput_metrics(hand_run):
    m = summarize(hand_run)
    assert m["completed"] == 2 and m["failed"] == 0
    assert m["duration_s"] == pytest.approx(3.0)
    assert m["output_tokens"] == 8
    assert m["output_tokens_per_s"] == pytest.approx(8 / 3)
    assert m["requests_per_s"] == pytest.approx(2 / 3)
    assert m["ttft_p50_s"] == pytest.approx(0.65)           # linear interpolation between 0.5 and 0.8
    assert m["ttft_p99_s"] == pytest.approx(0.5 + 0.99 * 0.3)
    assert m["ttft_mean_s"] == pytest.approx(0.65)
    assert m["tpot_p50_s"] == pytest.approx((0.25 + 1.0) / 2)
    assert m["tpot_p90_s"] == pytest.approx(0.25 + 0.9 * 0.75)
    assert m["e2e_p50_s"] == pytest.approx((1.5 + 2.8) / 2)
    assert m["queue_wait_p50_s"] == pytest.approx(0.15)
    assert m["queue_wait_p99_s"] == pytest.approx(0.99 * 0.3)


def test_waste_and_batch_metrics(hand_run):
    m = summarize(hand_run)
    assert m["padding_waste_pct"] == pytest.approx(100 * 3 / 14)       # 3 pad slots of 8 + 4 + 2 computed
    assert m["kv_waste_pct"] == pytest.approx(100 * (0.25 + 0.25 + 0.5) / 3)
    assert m["mean_batch_size"] == pytest.approx(5 / 3)
    assert m["mean_active_batch_size"] == pytest.approx(4 / 3)
    assert m["num_steps"] == 3
    assert m["mean_step_ms"] == pytest.approx(500.0)


def test_goodput(hand_run):
    assert summarize(hand_run)["goodput_requests_per_s"] == pytest.approx(2 / 3)
    m = summarize(hand_run, slo_ttft_s=0.6)
    assert m["goodput_requests_per_s"] == pytest.approx(1 / 3)
    assert m["goodput_output_tokens_per_s"] == pytest.approx(5 / 3)
    assert m["slo_attainment_pct"] == pytest.approx(50.0)
    assert summarize(hand_run, slo_tpot_s=0.5)["goodput_requests_per_s"] == pytest.approx(1 / 3)
    assert summarize(hand_run, slo_ttft_s=1.0, slo_tpot_s=1.0)["slo_attainment_pct"] == pytest.approx(100.0)


def test_runs_without_steps_or_completions():
    run = LaneRun("hf-cb", [request_record(0, _output(0, 1.0, 1.2, 2.0, 3), 1.1)], [], 1.0)
    m = summarize(run)
    assert m["padding_waste_pct"] is None and m["kv_waste_pct"] is None and m["mean_batch_size"] is None
    assert m["output_tokens_per_s"] == pytest.approx(3.0)
    aborted = _output(1, 1.0, None, 1.5, 0)
    aborted.finish_reason = "abort"
    m = summarize(LaneRun("x", [request_record(1, aborted, None)], [], 1.0))
    assert m["completed"] == 0 and m["failed"] == 1 and m["ttft_p50_s"] is None and m["output_tokens_per_s"] is None


def _specs(prompt_lens, max_tokens):
    return [RequestSpec(i, 0.0, m, prompt_token_ids=[5 + i] * p)
            for i, (p, m) in enumerate(zip(prompt_lens, max_tokens))]


def test_generate_batch_waste():
    # prompts of 3 and 5 tokens (padded to 5), max_tokens 2 and 4: generate() runs 4 forwards
    steps = generate_steps(_specs([3, 5], [2, 4]), 0.0, [1.0, 2.0, 3.0, 4.0])
    assert [(s.prefill_tokens, s.decode_tokens, s.padding_tokens) for s in steps] == [
        (8, 0, 2), (0, 2, 0), (0, 1, 1), (0, 1, 1)]
    assert [s.kv_allocated_slots for s in steps] == [10, 12, 14, 16]
    assert [s.kv_unused_slots for s in steps] == [2, 2, 3, 4]
    assert [s.active_rows for s in steps] == [2, 2, 1, 1]
    m = summarize(LaneRun("hf-generate", [], steps, 0.0))
    assert m["padding_waste_pct"] == pytest.approx(100 * 4 / 16)
    assert m["kv_waste_pct"] == pytest.approx(100 * np.mean([2 / 10, 2 / 12, 3 / 14, 4 / 16]))


def test_generate_batch_padding_matches_our_static_engine(tiny_llama_dir):
    """Our static batching computes the same padded slots as generate() on the same batch."""
    prompts, max_tokens = [[5] * 3, [6] * 5], [2, 4]
    eng = make_engine(tiny_llama_dir, strategy="static", static_batch_size=2)
    for p, m in zip(prompts, max_tokens):
        eng.add_request(p, greedy(m))
    eng.draining = True
    samples = []
    while eng.has_unfinished():
        s = step_sample(eng.step())
        if s is not None:
            samples.append(s)
    ours = [(s.prefill_tokens, s.decode_tokens, s.padding_tokens) for s in samples]
    theirs = [(s.prefill_tokens, s.decode_tokens, s.padding_tokens)
              for s in generate_steps(_specs([3, 5], max_tokens), 0.0, [1.0, 2.0, 3.0, 4.0])]
    assert ours == theirs


def test_speedups_and_table():
    rows = [{"lane": "continuous", "strategy": "continuous", "output_tokens_per_s": 30.0, "requests_per_s": 1.0, "ttft_p50_s": 0.5,
             "tpot_p50_s": 0.1, "e2e_p50_s": 2.0, "rate": None, "workload": "w"},
            {"lane": "static", "strategy": "static", "output_tokens_per_s": 10.0, "requests_per_s": 0.5, "ttft_p50_s": 2.0,
             "tpot_p50_s": 0.1, "e2e_p50_s": 4.0, "rate": None, "workload": "w"}]
    assert speedup(rows[0], rows[1], "output_tokens_per_s", True) == pytest.approx(3.0)
    assert speedup(rows[0], rows[1], "ttft_p50_s", False) == pytest.approx(4.0)
    add_ratios(rows)
    assert rows[0]["vs_static_output_tokens_per_s"] == pytest.approx(3.0)
    assert rows[1]["vs_static_output_tokens_per_s"] == pytest.approx(1.0)
    table = format_table(rows)
    assert "speedup vs static" in table and "3.00x" in table and "4.00x" in table
    assert "speedup vs hf-generate" not in table


def test_ratios_against_the_first_lane_when_no_lane_is_static():
    rows = [{"lane": "Block 16", "strategy": "continuous", "output_tokens_per_s": 20.0, "rate": None},
            {"lane": "block.128", "strategy": "continuous", "output_tokens_per_s": 10.0, "rate": None},
            {"lane": "hf-generate", "strategy": "hf-generate", "output_tokens_per_s": 5.0, "rate": None}]
    add_ratios(rows)
    assert [r["vs_block_16_output_tokens_per_s"] for r in rows] == [1.0, 0.5, 0.25]
    assert [r["vs_hf_generate_output_tokens_per_s"] for r in rows] == [4.0, 2.0, 1.0]
    table = format_table(rows)
    assert "speedup vs Block 16" in table and "speedup vs hf-generate" in table
