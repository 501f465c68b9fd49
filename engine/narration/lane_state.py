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
        self.told = {t for t in self.told if t[1] != rid}
        self.served += known is not None
        return known is not None and not self.waiting and not self.running
