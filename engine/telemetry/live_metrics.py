"""Live metrics from the service's events: the benchmark's own definitions (metrics.py) over one run.

A run is a scenario's request stream (from its run_started status event), or everything since the
page's Clear views (`since_s`), or, before either, everything the hub still holds. Paused time is left
out of every latency and of the run's duration (pauses.py). The browser sessions that show one run share
one LiveMetrics (pages/ui/hub_reader.py); every number comes from the engines' events, nothing is estimated.
"""
from __future__ import annotations

import math
import time
from collections import deque
from itertools import repeat

import numpy as np

from ..event_hub import HubReader
from ..events import RUN_STARTED, FinishedEvent, RequestEvent, StatusEvent, StepMessage
from .metrics import summarize, ttft
from .pauses import Pauses
from .records import LaneRun, RequestLabel, RequestRecord, step_sample

WINDOW_STEPS = 2000      # per lane
WINDOW_REQUESTS = 500    # finished requests kept per lane
RUN_END_GRACE_S = 3.0    # a run has ended once nothing is in flight and nothing arrived or ended for this long
_clock = time.monotonic  # how old a summary is (tests set it)


class _LaneWindow:
    def __init__(self):
        self.steps: deque = deque(maxlen=WINDOW_STEPS)
        self.done: deque = deque(maxlen=WINDOW_REQUESTS)
        self.scheduled: dict[int, float] = {}   # request id -> first admitted (running time)
        # request id -> (priority, tenant); with a tenant, -> itself (per-tenant service). Kept until the
        # request leaves the window, so a long session keeps only what the window holds.
        self.labels: dict[int, tuple[int, str | None]] = {}
        self.tenanted: dict[int, int] = {}
        self.in_flight = 0
        self.preemptions = 0
        # the longest a request waited between two of its tokens (running time), and each request's last
        self.max_token_wait_s: float | None = None
        self.last_token_s: dict[int, float] = {}

    def on_request(self, ev: RequestEvent) -> None:
        self.in_flight += 1
        self.labels[ev.request_id] = (ev.priority, ev.tenant)
        if ev.tenant is not None:
            self.tenanted[ev.request_id] = ev.request_id

    def on_step(self, ev, pauses: Pauses) -> None:
        for rid in ev.admitted:
            self.scheduled.setdefault(rid, pauses.running_s(ev.t_start))
        self.preemptions += len(ev.preempted)
        self._token_waits(ev, pauses.running_s(ev.t_end))
        sample = step_sample(ev, self.tenanted if self.tenanted else None)
        if sample is not None:
            self.steps.append(sample)

    def _token_waits(self, ev, t: float) -> None:
        """Each request's wait since its previous token: a step's length on one engine; on a disaggregated
        lane also the time its decode engine waited for a turn or for other steps."""
        # (map and dict.fromkeys walk a 256-row step in C: every open tab reads every step)
        earliest = min(map(self.last_token_s.get, ev.sampled, repeat(math.inf)), default=math.inf)
        if earliest != math.inf:  # some of them had a token before
            self.max_token_wait_s = max(self.max_token_wait_s or 0.0, t - earliest)
        self.last_token_s.update(dict.fromkeys(ev.sampled, t))

    def on_finished(self, ev: FinishedEvent, pauses: Pauses) -> None:
        self.last_token_s.pop(ev.request_id, None)
        rid, at = ev.request_id, pauses.running_s
        if len(self.done) == self.done.maxlen:  # the oldest leaves the window
            self.labels.pop(self.done[0].index, None)
            self.tenanted.pop(self.done[0].index, None)
        self.done.append(RequestRecord(rid, at(ev.arrival_s), self.scheduled.pop(rid, None), at(ev.first_token_s),
                                       at(ev.finish_s), ev.num_prompt_tokens, ev.num_output_tokens,
                                       ev.finish_reason))
        self.in_flight = max(0, self.in_flight - 1)

    def summary(self, lane: str, slo: tuple[float | None, float | None] = (None, None)) -> dict:
        """The lane's metrics; goodput and the share of requests meeting `slo` (TTFT, TPOT seconds)."""
        done = list(self.done)
        t0 = min((r.arrival_s for r in done), default=0.0)
        specs = [RequestLabel(r.index, tenant=self._label(r)[1]) for r in done]
        res = summarize(LaneRun(lane, done, list(self.steps), t0=t0), *slo, specs=specs)
        res["in_flight"] = self.in_flight
        res["preemptions"] = self.preemptions
        res["max_token_wait_s"] = self.max_token_wait_s
        res["urgent_ttft_s"] = _max([ttft(r) for r in done if self._label(r)[0] < 0])
        res["tenant_ttft_p50_s"] = self._tenant_ttfts(done)
        return res

    def _label(self, r: RequestRecord) -> tuple[int, str | None]:
        return self.labels.get(r.index, (0, None))

    def _tenant_ttfts(self, done: list[RequestRecord]) -> dict[str, float]:
        by: dict[str, list[float]] = {}
        for r in done:
            tenant = self._label(r)[1]
            if tenant is not None and ttft(r) is not None:
                by.setdefault(tenant, []).append(ttft(r))
        return {t: float(np.percentile(v, 50)) for t, v in by.items()}


def _max(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


class LiveMetrics(HubReader):
    """Reads the hub; summary() gives the metric cards' numbers per lane, for the current run."""

    def __init__(self, since_s: float = 0.0, cleared: bool = False):
        super().__init__()
        self.windows: dict[str, _LaneWindow] = {}
        self.since_s = since_s   # the run began then: what happened before is not part of it
        self.cleared = cleared   # since_s is a Clear views
        self.run_title: str | None = None  # the scenario whose run this is (None: no scenario ran since)
        self.pauses = Pauses()
        self.last_activity_s: float | None = None  # the run's latest arrival or end
        self._summary = None     # cached (summary() says until when)
        self._summary_at = -math.inf  # when it was computed (_clock)
        self._changed = True     # events came since it was
        self._slos: dict[str, tuple] = {}

    def on_event(self, event) -> None:
        self.pauses.on_event(event)
        super().on_event(event)

    def on_status(self, ev: StatusEvent) -> None:
        if ev.event == RUN_STARTED and ev.t >= self.since_s:
            self._new_run(ev.t, ev.message)

    def on_request(self, ev: RequestEvent) -> None:
        if ev.lane is not None and ev.arrival_s >= self.since_s:
            self._window(ev.lane).on_request(ev)
            self._active(ev.arrival_s)

    def on_step(self, msg: StepMessage) -> None:
        if msg.lane is not None and msg.event.t_start >= self.since_s:
            self._window(msg.lane).on_step(msg.event, self.pauses)

    def on_finished(self, ev: FinishedEvent) -> None:
        if ev.lane is not None and ev.arrival_s >= self.since_s:
            self._window(ev.lane).on_finished(ev, self.pauses)
            self._active(ev.finish_s or ev.arrival_s)

    def _window(self, lane: str) -> _LaneWindow:
        self._changed = True
        return self.windows.setdefault(lane, _LaneWindow())

    def _active(self, t: float) -> None:
        self.last_activity_s = max(t, self.last_activity_s or t)

    def _new_run(self, t: float, title: str | None) -> None:
        self.windows.clear()
        self.since_s, self.run_title, self.cleared = t, title, False
        self.last_activity_s, self._summary = None, None

    def summary(self, slos: dict[str, tuple] | None = None, max_age_s: float = 0.0) -> dict[str, dict]:
        """Per lane, with each lane's latency SLOs (lane -> (TTFT, TPOT) seconds, None: none); recomputed
        only after new events or other SLOs, and where events came since, not before it is max_age_s old (the
        browser tabs that share it refresh it every second each: at a GPU's pace each would recompute it)."""
        slos = slos or {}
        stale = self._changed and _clock() - self._summary_at >= max_age_s
        if self._summary is None or stale or self._slos != slos:
            self._slos = dict(slos)
            self._summary = {s: w.summary(s, slos.get(s, (None, None))) for s, w in self.windows.items()}
            self._summary_at, self._changed = _clock(), False
        return self._summary

    def ended(self, now_s: float) -> bool:
        """Every lane has finished what it was sent and nothing new came for RUN_END_GRACE_S."""
        s = self.summary(self._slos)
        return (bool(s) and all(r["in_flight"] == 0 and r["completed"] > 0 for r in s.values())
                and self.last_activity_s is not None and now_s - self.last_activity_s >= RUN_END_GRACE_S)

    def paused_s(self, now_s: float) -> float:
        """Paused time within this run, so far."""
        before = self.since_s - self.pauses.running_s(self.since_s, now_s)
        return self.pauses.paused_s(now_s) - before


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b
