"""Feed the hub's items in order; read back the latest sentences.

Pace: at most one sentence per lane every `min_gap_s` of engine time (the most interesting thing that
happened since the last one; what is older than a few gaps is dropped as stale), so a room can read
along. A lane's run ends when it stays idle for IDLE_GRACE_S (a gap in a Poisson stream does not end
it); then "finished all 16 requests in 4.2 s" and the comparison with the lanes that finished the same
run before it are always said. Time moves with the events, or with `now` given to `recent`."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.events import REMOTE

from .lane_state import LaneState, Req
from .sentences import Candidate, long_wait, step_candidates

STALE_GAPS = 3
IDLE_GRACE_S = 3.0


@dataclass(frozen=True)
class Sentence:
    t: float           # engine time (the service's clock)
    lane: str | None   # None: a sentence comparing lanes
    step: int | None
    text: str


class Narrator:
    def __init__(self, min_gap_s: float = 2.0, keep: int = 40):
        self.min_gap_s = min_gap_s
        self.cursor = 0
        self.sentences: deque[Sentence] = deque(maxlen=keep)
        self.lanes: dict[str, LaneState] = {}
        self._pending: dict[str, tuple[float, int, Candidate]] = {}  # lane -> (t, step, best candidate)
        self._last_said: dict[str, float] = {}
        self._last_text: dict[str, str] = {}
        self._done: dict[str, tuple[int, float, float]] = {}  # lane -> its last run: (requests, start, seconds)
        self._idle_at: dict[str, float] = {}  # lane -> when it went idle (its run may still go on)

    def consume(self, hub) -> None:
        batch = hub.read(self.cursor, limit=20000)
        self.cursor = batch.cursor
        for _, item in batch.events:
            self.feed(item)

    def recent(self, n: int = 6, now: float | None = None) -> list[Sentence]:
        """The latest n sentences, newest first; `now` (the service's clock) ends runs gone idle and tells
        of lanes that have only waited for a while."""
        if now is not None:
            self._end_runs(now)
            self._long_waits(now)
        return list(self.sentences)[::-1][:n]

    def feed(self, item: dict) -> None:
        lane = item.get("lane")
        if lane is None or item.get("strategy") == REMOTE:
            return self._lanes_event(item) if item["type"] == "lanes" else None
        st = self.lanes.setdefault(lane, LaneState())
        st.strategy = item.get("strategy") or st.strategy
        if item["type"] == "request":
            self._end_runs(item["arrival_s"])
            same_run = self._idle_at.pop(lane, None) is not None
            st.arrive(Req(item["request_id"], item["arrival_s"], item["num_prompt_tokens"], item["max_tokens"],
                          item.get("tenant"), item.get("priority", 0)), same_run)
        elif item["type"] == "step":
            self._end_runs(item["event"].t_end)
            self._step(lane, st, item["event"])
        elif item["type"] == "waits":
            st.wait(item["waits"], item["t"])
        elif item["type"] == "finished":
            t = item["finish_s"] or item["arrival_s"]
            self._end_runs(t)
            if st.finish(item["request_id"]):
                self._idle_at[lane] = t

    def _lanes_event(self, item: dict) -> None:
        for name, cfg in item["lanes"].items():
            st = self.lanes.setdefault(name, LaneState())
            st.policy = cfg.get("scheduling_policy", "fcfs")
            st.strategy = cfg.get("strategy", st.strategy)

    def _step(self, lane: str, st: LaneState, ev) -> None:
        for c in step_candidates(ev, st):
            if c.request_id is not None:
                st.told.add((c.kind, c.request_id))
            if c.kind == "recompute":
                st.preempted.discard(c.request_id)
            best = self._pending.get(lane)
            if best is None or c.rank < best[2].rank:
                self._pending[lane] = (ev.t_end, ev.step, c)
        st.admit(ev.admitted)
        st.preempt(ev.preempted)
        st.prev_finished = list(ev.finished)
        st.wait(ev.waits, ev.t_end)
        if ev.entries:
            st.last_compute_s = ev.t_end
        self._maybe_say(lane, ev.t_end)

    def _long_waits(self, now: float) -> None:
        for lane, st in self.lanes.items():
            c = long_wait(st, now)
            if c is not None and (c.kind, c.request_id) not in st.told:
                st.told.add((c.kind, c.request_id))
                self._say(Sentence(now, lane, None, c.text))

    def _maybe_say(self, lane: str, now: float) -> None:
        pending = self._pending.get(lane)
        if pending is None or now - self._last_said.get(lane, float("-inf")) < self.min_gap_s:
            return
        t, step, c = self._pending.pop(lane)
        if now - t <= STALE_GAPS * self.min_gap_s and c.text != self._last_text.get(lane):
            self._last_text[lane] = c.text  # a static batch's padding stays the same for many iterations
            self._say(Sentence(t, lane, step, f"iteration {step}: {c.text}"))

    def _say(self, s: Sentence) -> None:
        self.sentences.append(s)
        if s.lane is not None:
            self._last_said[s.lane] = s.t

    def _end_runs(self, now: float) -> None:
        for lane, t in list(self._idle_at.items()):
            if now - t >= IDLE_GRACE_S:
                del self._idle_at[lane]
                self._run_done(lane, self.lanes[lane], t)

    def _run_done(self, lane: str, st: LaneState, t: float) -> None:
        self._pending.pop(lane, None)
        start = st.busy_since if st.busy_since is not None else t
        took = t - start
        self._done[lane] = (st.served, start, took)
        self._say(Sentence(t, lane, None, f"finished all {st.served} requests in {took:.1f} s"))
        # the same stream: as many requests, started together
        others = [f"{took / s:.1f}x the time {name} took" for name, (n, t0, s) in self._done.items()
                  if name != lane and n == st.served > 1 and abs(t0 - start) < 1.0 and s > 0 and took > 1.2 * s]
        if others:
            self._say(Sentence(t, None, None, f"{lane} needed {', '.join(others)} for the same {st.served} requests"))
