"""What the narrator remembers of one lane's requests between its step events."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Req:
    request_id: int
    arrival_s: float
    prompt_len: int | None
    max_tokens: int
    tenant: str | None = None
    priority: int = 0


@dataclass
class LaneState:
    strategy: str | None = None
    policy: str = "fcfs"
    waiting: dict[int, Req] = field(default_factory=dict)  # arrived, not admitted yet
    running: dict[int, Req] = field(default_factory=dict)  # admitted, not finished
    preempted: set[int] = field(default_factory=set)      # preempted, not recomputed yet
    told: set[tuple[str, int]] = field(default_factory=set)  # (kind, request id) said once already
    prev_finished: list[int] = field(default_factory=list)  # the previous iteration's finished ids
    busy_since: float | None = None  # first arrival since the lane was last idle
    served: int = 0                  # requests finished since then
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

    def arrive(self, req: Req, same_run: bool = False) -> None:
        """same_run: the lane was idle only for a moment; its run goes on."""
        if not self.waiting and not self.running and not same_run:
            self.busy_since, self.served = req.arrival_s, 0
        self.waiting[req.request_id] = req

    def req(self, rid: int) -> Req | None:
        return self.running.get(rid) or self.waiting.get(rid)

    def admit(self, rids) -> None:
        for rid in rids:
            if rid in self.waiting:
                self.running[rid] = self.waiting.pop(rid)

    def preempt(self, rids) -> None:
        for rid in rids:
            if rid in self.running:
                self.waiting[rid] = self.running.pop(rid)
            self.preempted.add(rid)

    def finish(self, rid: int) -> bool:
        """Forget the request; True when the lane has nothing left (it just went idle)."""
        known = self.waiting.pop(rid, None) or self.running.pop(rid, None)
        self.preempted.discard(rid)
        self.waits.pop(rid, None)
        self.wait_since.pop(rid, None)
        self.told = {t for t in self.told if t[1] != rid}
        self.served += known is not None
        return known is not None and not self.waiting and not self.running
