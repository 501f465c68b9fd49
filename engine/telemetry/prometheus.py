"""Prometheus metrics for operators, under vLLM's names so a dashboard built for vLLM reads Inflight.

Each EngineService owns one ServiceMetrics (its own CollectorRegistry, never the global one). It is
fed the events the service already publishes (step, request, finished), in the engine thread that
publishes them, so nothing is missed however rarely /metrics is scraped; the gauges (running,
waiting, KV usage) are read from the lanes at scrape time. Every series carries `model_name` (as
vLLM) and `lane`.

As in vLLM, a request's prompt tokens count once, at its first token (tokens served from the prefix
cache included; prefix_cache_hits says how many were); an iteration's tokens leave out static
batching's padding. Speculative decoding: generation tokens count accepted drafts; the spec_decode
counters count drafts, draft tokens and accepted ones (in all, and by place in the draft). Latencies
use the engine's clock: time to first token and inter-token latency end at the end of the step that
sampled the token.

Remote lanes are left out: their server exports its own /metrics, and what we time of them is
measured at the client, not in an engine.
"""
from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..events import FinishedEvent, RequestEvent, StepMessage
from ..scheduler.waits import TEMPLATES as WAIT_REASONS
from ..scheduler.waits import kind as wait_kind
from ..slo import meets_slo, tpot_s

log = logging.getLogger(__name__)
LABELS = ("model_name", "lane")
FINISH_REASONS = ("stop", "length", "abort", "error")
# vLLM's buckets, so that histogram quantiles compare across the two
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# lane -> (model name, its worker's status()): what the gauges read at scrape time
LaneStates = Callable[[], dict[str, tuple[str, dict]]]


class ServiceMetrics:
    def __init__(self, lane_states: LaneStates, model_of: Callable[[str], str],
                 slo_of: Callable[[str], tuple] = lambda lane: (None, None)):
        """model_of(lane): the model the lane runs (its `model_name` label); slo_of(lane): its latency SLOs
        (TTFT, TPOT seconds; None: none)."""
        self.registry = CollectorRegistry()
        self._model_of, self._slo_of = model_of, slo_of
        self._lock = threading.Lock()
        self._arrival: dict[tuple[str, int], tuple[float, int]] = {}  # (lane, request id) -> arrival, prompt
        self._last_token: dict[tuple[str, int], float] = {}  # (lane, request id) -> its last token's time
        self._seen: set[tuple[str, str]] = set()             # (model, lane) whose series exist
        self.registry.register(_LaneGauges(lane_states))
        self._counters()
        self._histograms()

    def _counters(self) -> None:
        def counter(name, doc, extra=()):
            return Counter(name, doc, [*LABELS, *extra], registry=self.registry)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens of the requests that started answering.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.preemptions = counter("vllm:num_preemptions",
                                   "Requests preempted (their KV freed to recompute, or swapped out).")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in prompt tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens served from the cache.")
        self.success = counter("vllm:request_success", "Requests ended, by finish reason.", ("finished_reason",))
        self.slo_met = counter("inflight:requests_meeting_slo", "Requests finished (stop or length) within "
                               "their lane's TTFT and TPOT SLOs: goodput is its rate (an unset SLO always holds).")
        self.drafts = counter("vllm:spec_decode_num_drafts", "Speculative decoding: rows that brought a draft.")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Speculative decoding: draft tokens.")
        self.accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens",
                                       "Speculative decoding: draft tokens accepted (they became output).")
        self.accepted_per_pos = counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                        "Speculative decoding: accepted draft tokens by their place in the draft.",
                                        ("position",))

    def _histograms(self) -> None:
        def histogram(name, doc, buckets):
            return Histogram(name, doc, LABELS, registry=self.registry, buckets=buckets)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds.",
                             E2E_BUCKETS)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total", "Tokens computed per engine step.",
                                          ITERATION_TOKEN_BUCKETS)

    # ---- feeding ------------------------------------------------------------------------------
    def observe(self, event) -> None:
        """One published event (an EventHub listener); events without a lane are the service's own."""
        if event.lane is None or event.is_remote:
            return
        labels = (self._model_of(event.lane), event.lane)
        with self._lock:
            self._ensure_series(labels)  # from a lane's first event ("ready"), as vLLM shows zeros
            if isinstance(event, StepMessage):
                self._on_step(labels, event.event)
            elif isinstance(event, RequestEvent):
                self._arrival[event.lane, event.request_id] = (event.arrival_s, event.num_prompt_tokens)
            elif isinstance(event, FinishedEvent):
                self._on_finished(labels, event)

    def _ensure_series(self, labels: tuple[str, str]) -> None:
        """Every series of a lane exists from its first event (zero until counted), as in vLLM."""
        if labels in self._seen or not labels[0]:
            return
        self._seen.add(labels)
        for m in (self.prompt_tokens, self.generation_tokens, self.preemptions, self.prefix_queries,
                  self.prefix_hits, self.ttft, self.itl, self.e2e, self.iteration_tokens, self.slo_met):
            m.labels(*labels)
        for reason in FINISH_REASONS:
            self.success.labels(*labels, reason)
        for m in (self.drafts, self.draft_tokens, self.accepted_tokens):
            m.labels(*labels)

    def _on_step(self, labels: tuple[str, str], ev) -> None:
        lane = labels[1]
        self.generation_tokens.labels(*labels).inc(len(ev.sampled) + sum(e.accepted for e in ev.entries))
        self._on_drafts(labels, [e for e in ev.entries if e.drafted])
        self.iteration_tokens.labels(*labels).observe(ev.tokens_used - ev.num_padding_tokens)
        self.preemptions.labels(*labels).inc(len(ev.preempted))
        self.prefix_queries.labels(*labels).inc(ev.prefix_queries)
        self.prefix_hits.labels(*labels).inc(ev.prefix_hits)
        last_token, since = self._last_token, defaultdict(int)  # a step's rows share few gaps: one observation each
        for rid in ev.sampled:
            key = (lane, rid)
            last = last_token.get(key)
            if last is not None:
                since[last] += 1
            elif key in self._arrival:
                arrival, prompt_tokens = self._arrival[key]
                self.ttft.labels(*labels).observe(ev.t_end - arrival)
                self.prompt_tokens.labels(*labels).inc(prompt_tokens)
            last_token[key] = ev.t_end
        itl = self.itl.labels(*labels)
        for last, n in since.items():
            observe_many(itl, ev.t_end - last, n)

    def _on_drafts(self, labels: tuple[str, str], entries) -> None:
        if not entries:
            return
        self.drafts.labels(*labels).inc(len(entries))
        self.draft_tokens.labels(*labels).inc(sum(e.drafted for e in entries))
        self.accepted_tokens.labels(*labels).inc(sum(e.accepted for e in entries))
        for e in entries:
            for pos in range(e.accepted):
                self.accepted_per_pos.labels(*labels, str(pos)).inc()

    def _on_finished(self, labels: tuple[str, str], ev: FinishedEvent) -> None:
        key = (labels[1], ev.request_id)
        self._arrival.pop(key, None)
        self._last_token.pop(key, None)
        self.success.labels(*labels, ev.finish_reason).inc()
        if ev.finish_s is not None:
            self.e2e.labels(*labels).observe(ev.finish_s - ev.arrival_s)
        ttft = None if ev.first_token_s is None else ev.first_token_s - ev.arrival_s
        tpot = tpot_s(ev.first_token_s, ev.finish_s, ev.num_output_tokens)
        if ev.finish_reason in ("stop", "length") and meets_slo(ttft, tpot, *self._slo_of(labels[1])):
            self.slo_met.labels(*labels).inc()

    # ---- reading ------------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The Prometheus text format of everything above."""
        return generate_latest(self.registry)


def observe_many(histogram, amount: float, n: int) -> None:
    """n observations of the same amount, as n calls of histogram.observe(amount) would leave it (each call
    takes two locks and scans the buckets: a 256-row step's inter-token latencies were a quarter of a
    millisecond of the engine thread's). Reads prometheus_client's own fields (the version is pinned;
    tests/engine/telemetry/test_prometheus_many.py holds it to observe)."""
    if n == 1 or amount != amount:  # (one, or NaN: observe's own way)
        for _ in range(n):
            histogram.observe(amount)
        return
    histogram._raise_if_not_observable()
    histogram._sum.inc(amount * n)
    histogram._buckets[bisect_left(histogram._upper_bounds, amount)].inc(n)


class _LaneGauges:
    """vllm:num_requests_running / _waiting / _waiting_by_reason and vllm:kv_cache_usage_perc, read from
    the lanes when scraped (a lane removed disappears; one waiting for a batch still shows its queue).
    By reason: vLLM's `reason` ("capacity": batch slots, token budget or KV blocks; "deferred": anything
    else) and ours in `detail` (engine/scheduler/waits.py), every pair present (zero when none waits so)."""

    def __init__(self, lane_states: LaneStates):
        self._lane_states = lane_states

    def describe(self):
        return []  # collected on demand only

    def collect(self):
        running = GaugeMetricFamily("vllm:num_requests_running", "Requests in the engine's batch.", labels=LABELS)
        waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting to be scheduled.",
                                    labels=LABELS)
        kv = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV cache usage (1 means every block in use).",
                               labels=LABELS)
        by_reason = GaugeMetricFamily("vllm:num_requests_waiting_by_reason", "Requests waiting, by why they wait.",
                                      labels=(*LABELS, "reason", "detail"))
        for lane, (model, st) in self._lane_states().items():
            if st.get("kv_blocks") is None:
                continue  # still loading, or failed to load
            running.add_metric((model, lane), st["num_running"])
            waiting.add_metric((model, lane), st["num_waiting"])
            kv.add_metric((model, lane), st["kv_used_blocks"] / max(st["kv_blocks"], 1))
            counts = st.get("waiting_by_reason", {})
            for code in WAIT_REASONS:
                by_reason.add_metric((model, lane, wait_kind(code), code), counts.get(code, 0))
        return [running, waiting, by_reason, kv]
