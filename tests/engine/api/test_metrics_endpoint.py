"""GET /metrics: vLLM-named Prometheus metrics per lane, read back with prometheus_client's own parser."""
from __future__ import annotations

import time
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine import SamplingParams
from engine.room.access import Access
from engine.events import DECODE, PADDING, PREFILL, StatusEvent, StepEntry, StepMessage
from engine.telemetry.prometheus import ServiceMetrics
from event_factories import finished_event, request_event
from service_helpers import app_fixture, clean_fixture, service_fixture

LANES = ("continuous", "dynamic")
TOKEN = "presenter-token-metrics-1"


svc = service_fixture(strategies=LANES)
base = app_fixture("base")


_clean = clean_fixture()


def scrape(base, **headers) -> dict:
    """{(sample name, frozenset of labels other than model_name): value}"""
    r = httpx.get(f"{base}/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            labels = {k: v for k, v in s.labels.items() if k != "model_name"}
            out[s.name, frozenset(labels.items())] = s.value
    return out


def value(samples, name, lane, **labels):
    """A series' value; 0 for one not there yet (a lane's series appear with its first event)."""
    return samples.get((name, frozenset({"lane": lane, **labels}.items())), 0)


def greedy(n):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def test_counters_and_histograms_after_real_requests(svc, base):
    before = scrape(base)
    prompts = ["Hello there", "The quick brown fox jumps", "Once upon a time"]
    handles = [h for p in prompts for h in svc.submit(p, greedy(5))]
    outs = [h.result(60) for h in handles]
    after = scrape(base)
    assert ("vllm:generation_tokens_total", frozenset({"lane": "dynamic"}.items())) in after
    prompt_len = sum(len(o.prompt_token_ids) for o in outs) // len(LANES)
    for lane in LANES:
        def delta(name, **labels):
            return value(after, name, lane, **labels) - value(before, name, lane, **labels)
        assert delta("vllm:generation_tokens_total") == 15
        assert delta("vllm:prompt_tokens_total") == prompt_len
        assert delta("vllm:request_success_total", finished_reason="length") == 3
        assert delta("vllm:request_success_total", finished_reason="abort") == 0
        assert delta("vllm:time_to_first_token_seconds_count") == 3
        assert delta("vllm:inter_token_latency_seconds_count") == 3 * 4
        assert delta("vllm:e2e_request_latency_seconds_count") == 3
        assert delta("vllm:e2e_request_latency_seconds_sum") > 0
        # every token computed but the last one sampled per request: prompts, then 4 decode steps each
        assert delta("vllm:iteration_tokens_total_sum") == prompt_len + 3 * 4
        assert value(after, "vllm:num_requests_running", lane) == 0
        assert value(after, "vllm:kv_cache_usage_perc", lane) == 0
        assert value(after, "vllm:prefix_cache_queries_total", lane) >= 0


def test_model_name_label_is_the_lane_model(svc, base):
    r = httpx.get(f"{base}/metrics", timeout=10)
    fam = next(f for f in text_string_to_metric_families(r.text) if f.name == "vllm:num_requests_waiting")
    assert {s.labels["lane"] for s in fam.samples} == set(LANES)
    assert {s.labels["model_name"] for s in fam.samples} == {svc.cfg.model}


def test_gauges_follow_the_queue_and_the_batch(svc, base):
    svc.pause()
    handles = svc.submit("Hello there", greedy(4), lanes=["continuous"])
    samples = scrape(base)
    assert value(samples, "vllm:num_requests_waiting", "continuous") == 1
    assert value(samples, "vllm:num_requests_running", "continuous") == 0
    steps = svc.workers["continuous"].steps
    svc.step_once()
    deadline = time.monotonic() + 10
    while svc.workers["continuous"].steps == steps and time.monotonic() < deadline:
        time.sleep(0.01)
    samples = scrape(base)
    assert value(samples, "vllm:num_requests_waiting", "continuous") == 0
    assert value(samples, "vllm:num_requests_running", "continuous") == 1
    assert 0 < value(samples, "vllm:kv_cache_usage_perc", "continuous") <= 1
    svc.resume()
    handles[0].result(30)


def test_room_mode_needs_the_presenter_token(svc, base):
    svc.access, loopback = Access(room=True, token=TOKEN, api_key="audience-key-metrics"), svc.access
    try:
        assert httpx.get(f"{base}/metrics", timeout=10).status_code == 401
        bad = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer audience-key-metrics"}, timeout=10)
        assert bad.status_code == 401
        assert scrape(base, Authorization=f"Bearer {TOKEN}")
    finally:
        svc.access = loopback
    assert httpx.get(f"{base}/metrics", headers={"Origin": "http://evil.example"}, timeout=10).status_code == 403


# ---- the arithmetic, on hand-made events ----------------------------------------------------------
def _step(t_end, entries, sampled, **extra):
    extra = {"prefix_queries": 0, "prefix_hits": 0, **extra}
    ev = SimpleNamespace(t_end=t_end, entries=entries, sampled=sampled, preempted=[],
                         tokens_used=sum(e.num_tokens for e in entries), **extra)
    ev.num_padding_tokens = sum(e.num_tokens for e in entries if e.phase == PADDING)
    return StepMessage(lane="a", event=ev)


def test_latencies_prefix_counters_and_padding_from_events():
    m = ServiceMetrics(lambda: {}, lambda lane: "m")
    m.observe(request_event(7, t=1.0, prompt=16))
    # 6 of its 16 prompt tokens came from the prefix cache: the prompt still counts 16, as in vLLM
    m.observe(_step(1.5, [StepEntry(7, PREFILL, 10, 16, cached_tokens=6), StepEntry(8, PADDING, 6, 0)], {7: 42},
                    prefix_queries=16, prefix_hits=6))
    m.observe(_step(1.75, [StepEntry(7, DECODE, 1, 11)], {7: 43}))
    m.observe(finished_event(7, t=2.0, arrival=1.0, reason="stop"))
    m.observe(StatusEvent(event="paused"))  # the service's own: ignored
    text = m.exposition().decode()
    s = {(x.name, x.labels.get("le"), x.labels.get("finished_reason")): x.value
         for f in text_string_to_metric_families(text) for x in f.samples}
    assert s["vllm:time_to_first_token_seconds_sum", None, None] == pytest.approx(0.5)
    assert s["vllm:inter_token_latency_seconds_sum", None, None] == pytest.approx(0.25)
    assert s["vllm:e2e_request_latency_seconds_sum", None, None] == pytest.approx(1.0)
    assert s["vllm:iteration_tokens_total_sum", None, None] == 11  # padding left out
    assert s["vllm:iteration_tokens_total_bucket", "8.0", None] == 1
    assert s["vllm:prompt_tokens_total", None, None] == 16
    assert s["vllm:prefix_cache_queries_total", None, None] == 16
    assert s["vllm:prefix_cache_hits_total", None, None] == 6
    assert s["vllm:request_success_total", None, "stop"] == 1
    assert s["vllm:request_success_total", None, "error"] == 0
    assert not m._arrival and not m._last_token  # nothing kept for a finished request


def test_requests_meeting_their_lanes_slos_are_counted():
    """inflight:requests_meeting_slo: finished (stop or length) within the lane's TTFT and TPOT SLOs."""
    m = ServiceMetrics(lambda: {}, lambda lane: "m", lambda lane: (1.0, 0.1))
    for rid, first, finish, n in ((1, 1.5, 2.0, 6), (2, 2.5, 3.0, 6), (3, 1.5, 4.0, 6), (4, 1.9, 1.9, 1)):
        m.observe(finished_event(rid, t=finish, arrival=1.0, reason="length", first_token_s=first, output_tokens=n))
    m.observe(finished_event(5, t=1.2, arrival=1.0, reason="abort", first_token_s=1.1, output_tokens=2))
    s = {x.name: x.value for f in text_string_to_metric_families(m.exposition().decode()) for x in f.samples}
    assert s["inflight:requests_meeting_slo_total"] == 2  # #2 was late, #3 slow per token, #5 aborted


def test_speculative_decoding_counters_from_events():
    """vLLM's spec_decode counters: rows that drafted, draft tokens, accepted ones in all and by place;
    generation tokens count the accepted drafts beside each row's own token."""
    m = ServiceMetrics(lambda: {}, lambda lane: "m")
    m.observe(_step(1.0, [StepEntry(1, DECODE, 5, 20, drafted=4, accepted=2), StepEntry(2, DECODE, 1, 9),
                          StepEntry(3, DECODE, 4, 30, drafted=3, accepted=3)], {1: 5, 2: 6, 3: 7}))
    m.observe(_step(1.1, [StepEntry(1, DECODE, 3, 23, drafted=2, accepted=0)], {1: 8}))
    s = {(x.name, x.labels.get("position")): x.value
         for f in text_string_to_metric_families(m.exposition().decode()) for x in f.samples}
    assert s["vllm:spec_decode_num_drafts_total", None] == 3
    assert s["vllm:spec_decode_num_draft_tokens_total", None] == 9
    assert s["vllm:spec_decode_num_accepted_tokens_total", None] == 5
    assert [s.get(("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(p))) for p in range(4)] == [2, 2, 1, None]
    assert s["vllm:generation_tokens_total", None] == 4 + 5


def test_waiting_requests_are_counted_by_why_they_wait(base, svc):
    """vLLM's num_requests_waiting_by_reason (capacity / deferred) with our reason in `detail`, read
    from the scheduler's last decision: a dynamic batch filling up, then nobody waiting."""
    svc.pause()  # nothing runs, so the request stays waiting and the continuous lane admits it
    handles = svc.submit([5, 6, 7], greedy(2), lanes=["dynamic"])
    svc.step_once()
    deadline = time.monotonic() + 10
    while value(scrape(base), "vllm:num_requests_waiting_by_reason", "dynamic", reason="deferred",
                detail="batch_filling") != 1:
        assert time.monotonic() < deadline, "the wait was not counted"
        time.sleep(0.05)
    samples = scrape(base)
    for detail in ("batch_full", "token_budget", "kv_blocks"):  # every pair present, zero here
        assert value(samples, "vllm:num_requests_waiting_by_reason", "dynamic", reason="capacity", detail=detail) == 0
        assert ("vllm:num_requests_waiting_by_reason",
                frozenset({"lane": "dynamic", "reason": "capacity", "detail": detail}.items())) in samples
    svc.resume()
    assert all(h.result(30).finish_reason == "length" for h in handles)
    assert value(scrape(base), "vllm:num_requests_waiting_by_reason", "dynamic", reason="deferred",
                 detail="batch_filling") == 0
