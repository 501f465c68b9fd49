"""Iteration-level (continuous) scheduling with chunked prefill and preemption by recompute."""
from __future__ import annotations

from ..request import Request
from .base import ScheduledRow, Scheduler, SchedulerOutput


class ContinuousScheduler(Scheduler):
    """Every iteration: running requests first (decodes and unfinished prefill
    chunks, FCFS), then waiting requests join while a batch slot, the token
    budget and free KV blocks allow. When blocks run out, the newest running
    request is preempted: its blocks are freed and it recomputes later."""

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.cfg.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if not self._grow(req, n, out):
                break  # req itself was preempted: it was the newest, nothing follows
            out.rows.append(ScheduledRow(req, self.phase_of(req, n), n, slot=len(out.rows)))
            budget -= n
            i += 1
        if not out.preempted:
            self._admit(out, budget)
        return out

    def _grow(self, req: Request, n: int, out: SchedulerOutput) -> bool:
        """Make room for n more tokens of req, preempting the newest requests if needed."""
        while not self.cache.allocate(req.request_id, req.num_computed_tokens + n):
            victim = self.running.pop()
            self._preempt(victim)
            out.preempted.append(victim.request_id)
            if victim is req:
                return False
        return True

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            remaining = req.num_tokens - req.num_computed_tokens
            if remaining > budget and not self.cfg.enable_chunked_prefill:
                break
            n = min(remaining, budget)
            if not self.cache.allocate(req.request_id, n):
                break  # FCFS: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.running.append(req)
            self._start(req)
            out.admitted.append(req.request_id)
            out.rows.append(ScheduledRow(req, self.phase_of(req, n), n, slot=len(out.rows)))
            budget -= n

    def _release(self, request: Request) -> None:
        if not self.remove_waiting(request):
            self.running.remove(request)
        self.cache.free(request.request_id)
