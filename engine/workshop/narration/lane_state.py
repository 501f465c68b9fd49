"""What the narrator remembers of one lane's requests between its step events: only what it saw happen
since it started, so that no sentence names a request it did not see arrive."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.events import DECODE_PART, StepEvent


@dataclass
class Req:
    request_id: int
    arrival_s: float
    prompt_len: int | None
    max_tokens: int
    tenant: str | None = None
    priority: int = 0


@dataclass
class Run:
    """A lane's requests since it was last idle. `floor`: before then the narrator does not know what the
    lane ran (it was still busy, or not watched yet): a request that arrived earlier makes the totals unknown."""
    floor: float
    start: float = float("inf")  # the first arrival
    ids: set[int] = field(default_factory=set)
    tainted: bool = False        # it met requests this narrator did not see arrive, or arrived before `floor`

    def add(self, req: Req) -> None:
        self.ids.add(req.request_id)
        self.start = min(self.start, req.arrival_s)  # requests reach the hub a little out of order
        self.tainted |= req.arrival_s < self.floor


@dataclass
class LaneState:
    strategy: str | None = None
    policy: str | None = None        # from the `lanes` event; None: unknown, so no jump is explained
    max_num_seqs: int | None = None  # from the `lanes` event; None: unknown, so nothing is said about slots
    slo_ttft_s: float | None = None  # from the `lanes` event: the slo policy's TTFT SLO (None: none known)
    waiting: dict[int, Req] = field(default_factory=dict)  # arrived, not admitted yet (or preempted)
    running: dict[int, Req] = field(default_factory=dict)  # admitted, not ended
    # ended and still in the last step's rows (a static batch's padding) or ended by it: pruned every step
    ended: dict[int, Req] = field(default_factory=dict)
    preempted: set[int] = field(default_factory=set)       # preempted while watched, not ended yet
    context: dict[int, int] = field(default_factory=dict)  # tokens in a request's KV after its last row
    prev: StepEvent | None = None    # the lane's previous step event
    told: set[tuple[str, int]] = field(default_factory=set)  # (kind, request id) said once already
    run: Run | None = None
    busy_until: float = float("-inf")  # when the lane last computed or ended something
    waits: dict[int, dict] = field(default_factory=dict)   # why each waiting request waits (the scheduler's)
    wait_since: dict[int, float] = field(default_factory=dict)  # since when it has waited for that reason
    last_compute_s: float | None = None  # the end of the lane's last iteration

    def wait(self, changes: dict, t: float) -> None:
        """Apply a step's (or a waits event's) changes of why requests wait, at time t."""
        for key, why in changes.items():
            rid = int(key)
            if why is None:
                self.waits.pop(rid, None)
                self.wait_since.pop(rid, None)
            elif self.waits.get(rid, {}).get("why") != why.get("why"):
                self.waits[rid], self.wait_since[rid] = why, t
            else:
                self.waits[rid] = why

    def arrive(self, req: Req, same_run: bool = False, since: float = float("-inf")) -> None:
        """same_run: the lane was idle only for a moment; its run goes on. since: from when the narrator knows
        what the lane did (a new run that began before that, or while unseen requests ran, is not counted)."""
        if self.run is None or not self.waiting and not self.running and not same_run:
            self.run = Run(max(self.busy_until, since))
        self.run.add(req)
        self.waiting[req.request_id] = req

    def known(self, rid: int) -> Req | None:
        """The request, if this narrator saw it arrive and may still hear of it."""
        return self.waiting.get(rid) or self.running.get(rid) or self.ended.get(rid)

    def apply(self, ev: StepEvent) -> None:
        """Move past one step event (once what it says was taken from the state before it)."""
        rows = {e.request_id for e in ev.entries}
        if self.run is not None and not self.run.tainted:  # (set differences: 256 rows a step at a GPU's pace)
            named = rows.union(ev.admitted, ev.preempted, ev.finished)
            self._taint(bool(named - self.waiting.keys() - self.running.keys() - self.ended.keys()))
        self._schedule(ev)
        self.ended = {rid: req for rid, req in self.ended.items() if rid in rows}
        for rid in ev.finished:
            self.finish(rid)
        self.context.update({e.request_id: e.context_len for e in ev.entries if e.request_id in self.running})
        # some waiting request arrived unseen (a disaggregated lane's decode half: its waiting requests were
        # handed on by the prefill half, running as far as the lane goes, or preempted there)
        known = len(self.running) + len(self.waiting) if ev.part == DECODE_PART else len(self.waiting)
        self._taint(ev.num_waiting > known)
        self.prev, self.busy_until = ev, ev.t_end

    def _taint(self, unseen: bool) -> None:
        if unseen and self.run is not None:
            self.run.tainted = True

    def _schedule(self, ev: StepEvent) -> None:
        for rid in ev.preempted:  # a step preempts before it admits (a victim may be admitted again at once)
            self._preempt(rid)
        for rid in ev.admitted:
            if rid in self.waiting:
                self.running[rid] = self.waiting.pop(rid)

    def _preempt(self, rid: int) -> None:
        if rid in self.running:
            self.waiting[rid] = self.running.pop(rid)
        if rid in self.waiting:
            self.preempted.add(rid)
            self.told -= {("recompute", rid), ("swapped_in", rid)}

    def finish(self, rid: int) -> bool:
        """The request ended; True when the lane has nothing it knows of left (it just went idle)."""
        req = self.waiting.pop(rid, None) or self.running.pop(rid, None)
        if req is not None:
            self.ended[rid] = req
            self.preempted.discard(rid)
            self.context.pop(rid, None)
            self.waits.pop(rid, None)
            self.wait_since.pop(rid, None)
            self.told = {t for t in self.told if t[1] != rid}
        return self.known(rid) is not None and not self.waiting and not self.running
