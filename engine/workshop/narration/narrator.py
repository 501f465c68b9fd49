"""Read the hub (or feed events in order to on_event); read back the latest sentences.

Pace: at most one sentence per lane every `min_gap_s` of engine time (the most interesting thing that
happened since the last one; what is older than a few gaps is dropped as stale), so a room can read
along. A lane's run ends when it stays idle for IDLE_GRACE_S (a gap in a Poisson stream does not end
it); then "finished all 16 requests in 4.2 s" and the comparison with the lanes that finished the same
requests before it are always said, unless the run met requests that arrived before the narrator started
(a fresh narrator reads the hub from where it starts: "Clear views"). Time moves with the events, or with
`now` given to `recent`."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...event_hub import HubReader
from ...events import FinishedEvent, LanesEvent, RequestEvent, StepMessage, WaitsEvent, is_remote_lane
from .lane_state import LaneState, Req
from .sentences import Candidate, counted, long_wait, step_candidates

STALE_GAPS = 3
IDLE_GRACE_S = 3.0


@dataclass(frozen=True)
class Sentence:
    t: float           # engine time (the service's clock)
    lane: str | None   # None: a sentence comparing lanes
    step: int | None
    text: str


class Narrator(HubReader):
    def __init__(self, min_gap_s: float = 2.0, keep: int = 40, lanes: dict[str, dict] | None = None,
                 cursor: int = 0):
        """lanes: the lanes' settings as a `lanes` event holds them, for a narrator that starts reading the hub
        after that event (Clear views); without them it says nothing of batch slots or scheduling policies
        until the next one. cursor: where it starts reading the hub; from anywhere but its beginning, what
        the lanes did before is unknown."""
        super().__init__(cursor)
        self._since = float("-inf") if cursor == 0 else None  # since when it knows what the lanes did (None: not yet)
        self.min_gap_s = min_gap_s
        self.sentences: deque[Sentence] = deque(maxlen=keep)
        self.lanes: dict[str, LaneState] = {}
        self._pending: dict[str, tuple[float, int, Candidate]] = {}  # lane -> (t, step, best candidate)
        self._last_said: dict[str, float] = {}
        self._last_text: dict[str, str] = {}
        self._done: dict[str, tuple[frozenset[int], float]] = {}  # lane -> its last run: (request ids, seconds)
        self._idle_at: dict[str, float] = {}  # lane -> when it went idle (its run may still go on)
        self.on_lanes(LanesEvent(lanes=lanes or {}))

    def on_skipped(self) -> None:
        self._forget()  # the hub dropped events this narrator never read: what it knew may be wrong now

    def recent(self, n: int = 6, now: float | None = None) -> list[Sentence]:
        """The latest n sentences, newest first; `now` (the service's clock) ends runs gone idle and tells
        of lanes that have only waited for a while."""
        if now is not None:
            self._since = now if self._since is None else self._since
            self._end_runs(now)
            self._long_waits(now)
        return list(self.sentences)[::-1][:n]

    def on_event(self, event) -> None:
        if event.lane is not None and not event.is_remote:  # a remote lane's server schedules out of sight
            st = self.lanes.setdefault(event.lane, LaneState())
            st.strategy = event.strategy or st.strategy
            super().on_event(event)
        elif isinstance(event, LanesEvent):
            self.on_lanes(event)

    def on_request(self, ev: RequestEvent) -> None:
        self._end_runs(ev.arrival_s)
        same_run = self._idle_at.pop(ev.lane, None) is not None
        self.lanes[ev.lane].arrive(Req(ev.request_id, ev.arrival_s, ev.num_prompt_tokens, ev.max_tokens, ev.tenant,
                                       ev.priority), same_run, float("inf") if self._since is None else self._since)

    def on_waits(self, ev: WaitsEvent) -> None:
        self.lanes[ev.lane].wait(ev.waits, ev.t)

    def on_finished(self, ev: FinishedEvent) -> None:
        st, t = self.lanes[ev.lane], ev.finish_s or ev.arrival_s
        self._end_runs(t)
        st.busy_until = max(st.busy_until, t)
        if st.finish(ev.request_id):
            self._idle_at[ev.lane] = t

    def _forget(self) -> None:
        self.lanes = {name: LaneState(st.strategy, st.policy, st.max_num_seqs, st.slo_ttft_s)
                      for name, st in self.lanes.items()}
        self._pending.clear()
        self._done.clear()
        self._idle_at.clear()
        self._since = None

    def on_lanes(self, ev: LanesEvent) -> None:
        for name, cfg in ev.lanes.items():
            if is_remote_lane(cfg):
                continue
            st = self.lanes.setdefault(name, LaneState())
            st.policy = cfg.get("scheduling_policy")
            st.strategy = cfg.get("strategy", st.strategy)
            st.max_num_seqs = cfg.get("max_num_seqs")
            st.slo_ttft_s = cfg.get("slo_ttft_s")

    def on_step(self, msg: StepMessage) -> None:
        lane, st, ev = msg.lane, self.lanes[msg.lane], msg.event
        self._since = ev.t_start if self._since is None else self._since
        self._end_runs(ev.t_end)
        self._consider(lane, st, ev)
        st.apply(ev)
        st.wait(ev.waits, ev.t_end)
        if ev.entries:
            st.last_compute_s = ev.t_end
        self._maybe_say(lane, ev.t_end)

    def _consider(self, lane: str, st: LaneState, ev) -> None:
        """Keep the most interesting of this step's sentences and those not said yet."""
        for c in step_candidates(ev, st):
            if c.request_id is not None:
                st.told.add((c.kind, c.request_id))
            best = self._pending.get(lane)
            if best is None or c.rank < best[2].rank:
                self._pending[lane] = (ev.t_end, ev.step, c)

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
        self._done.pop(lane, None)
        if st.run is None or st.run.tainted:
            return
        run, took = frozenset(st.run.ids), t - st.run.start
        self._done[lane] = (run, took)
        told = f"all {counted(len(run), 'request')}" if len(run) > 1 else "its 1 request"
        self._say(Sentence(t, lane, None, f"finished {told} in {took:.1f} s"))
        # the same stream: one submission has the same request id on every lane
        others = [f"{took / s:.1f}x the time {name} took" for name, (ids, s) in self._done.items()
                  if name != lane and ids == run and len(run) > 1 and s > 0 and took > 1.2 * s]
        if others:
            self._say(Sentence(t, None, None, f"{lane} needed {', '.join(others)} for the same {len(run)} requests"))
