"""Live metrics from the engine's event stream: the benchmark's own definitions, over a window.

Fed with EventHub items (step / request / finished), one LiveMetrics per browser
session. Every number comes from the engines' events; nothing is estimated.
"""
from __future__ import annotations

from collections import deque

from engine.bench.metrics import summarize
from engine.bench.records import RequestRecord, StrategyRun, step_sample

WINDOW_STEPS = 2000      # per strategy
WINDOW_REQUESTS = 500    # finished requests kept per strategy


class _StrategyWindow:
    def __init__(self):
        self.steps: deque = deque(maxlen=WINDOW_STEPS)
        self.done: deque = deque(maxlen=WINDOW_REQUESTS)
        self.scheduled: dict[int, float] = {}   # request id -> first admitted (step start)
        self.in_flight = 0

    def on_step(self, ev) -> None:
        for rid in ev.admitted:
            self.scheduled.setdefault(rid, ev.t_start)
        sample = step_sample(ev)
        if sample is not None:
            self.steps.append(sample)

    def on_finished(self, item: dict) -> None:
        rid = item["request_id"]
        self.done.append(RequestRecord(rid, item["arrival_s"], self.scheduled.pop(rid, None),
                                       item["first_token_s"], item["finish_s"], item["num_prompt_tokens"],
                                       item["num_output_tokens"], item["finish_reason"]))
        self.in_flight = max(0, self.in_flight - 1)

    def summary(self, strategy: str) -> dict:
        t0 = min((r.arrival_s for r in self.done), default=0.0)
        res = summarize(StrategyRun(strategy, list(self.done), list(self.steps), t0=t0))
        res["in_flight"] = self.in_flight
        # the longest a decoding request waited for its next token: the longest step with decode rows
        res["max_decode_step_s"] = max((s.t_end - s.t_start for s in self.steps if s.decode_tokens), default=None)
        return res


class LiveMetrics:
    """Consumes hub batches; summary() gives the metric cards' numbers per strategy."""

    def __init__(self):
        self.windows: dict[str, _StrategyWindow] = {}
        self.cursor = 0          # hub sequence number of the next event to read
        self.skipped = 0         # events that left the ring buffer before we read them
        self.since_s = 0.0       # "clear": ignore what happened before this service time
        self._summary = None     # cached until the next event

    def consume(self, hub, limit: int = 20000) -> None:
        batch = hub.read(self.cursor, limit=limit)
        self.cursor, self.skipped = batch.cursor, self.skipped + batch.skipped
        for _, item in batch.events:
            self.add(item)

    def add(self, item: dict) -> None:
        kind, strategy = item["type"], item.get("lane")
        if strategy is None or kind not in ("step", "request", "finished"):
            return
        w = self.windows.setdefault(strategy, _StrategyWindow())
        self._summary = None
        if kind == "step":
            if item["event"].t_start >= self.since_s:
                w.on_step(item["event"])
        elif kind == "request":
            if item["arrival_s"] >= self.since_s:
                w.in_flight += 1
        elif item["arrival_s"] >= self.since_s:
            w.on_finished(item)

    def clear(self, now_s: float) -> None:
        self.windows.clear()
        self.since_s = now_s
        self._summary = None

    def summary(self) -> dict[str, dict]:
        """Per strategy; recomputed only after new events (a page refreshes it every second)."""
        if self._summary is None:
            self._summary = {s: w.summary(s) for s, w in self.windows.items()}
        return self._summary


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b
