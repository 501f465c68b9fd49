"""Iteration-level (continuous) scheduling with chunked prefill and preemption by recompute."""
from __future__ import annotations

from ..request import Request
from .base import ScheduledRow, Scheduler, SchedulerOutput


class ContinuousScheduler(Scheduler):
    """Every iteration: running requests first (decodes and unfinished prefill chunks, in policy
    order), then waiting requests join, in policy order, while a batch slot, the token budget and
    free KV blocks allow. When blocks run out, the last running request in policy order (fcfs: the
    newest) is preempted: its blocks are freed and it recomputes later. Under the priority policy
    a waiting request that cannot start also preempts running requests of strictly worse priority."""

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        self.running = self.policy.order(self.running, self.clock())
        self._preempt_for_waiting(out)
        budget = self.cfg.max_num_batched_tokens
        short = len(out.preempted)
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if not self._grow(req, n, out):
                break  # req itself was preempted: it was the last, nothing follows
            out.rows.append(ScheduledRow(req, self.phase_of(req, n), n, slot=len(out.rows)))
            budget -= n
            i += 1
        if len(out.preempted) == short:  # unless blocks ran short for the running ones
            self._admit(out, budget)
        return out

    def _grow(self, req: Request, n: int, out: SchedulerOutput) -> bool:
        """Make room for n more tokens of req, preempting the last running requests if needed."""
        while not self.cache.allocate(req.request_id, req.num_computed_tokens + n):
            victim = self._preempt_last(out)
            if victim is req:
                return False
        return True

    def _preempt_last(self, out: SchedulerOutput) -> Request:
        victim = self.running.pop()
        self._preempt(victim)
        out.preempted.append(victim.request_id)
        return victim

    def _preempt_for_waiting(self, out: SchedulerOutput) -> None:
        """The first waiting request, if it lacks a slot or blocks to start, preempts the running
        requests it outranks (priority policy only), last first, until it could start."""
        self._order_waiting()
        if not self.waiting:
            return
        head = self.waiting[0]
        while self.running and self.policy.outranks(head, self.running[-1]) and not self._could_start(head):
            self._preempt_last(out)
        self._order_waiting()  # the victims queue behind the head

    def _could_start(self, req: Request) -> bool:
        cached = self._cached_prefix(req)
        hit = len(cached) * self.cache.block_size
        first_chunk = min(req.num_tokens - hit, self.cfg.max_num_batched_tokens)
        return (len(self.running) < self.cfg.max_num_seqs
                and self.cache.blocks_to_start(hit + first_chunk, cached) <= self.cache.num_free)

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            cached = self._cached_prefix(req)
            remaining = req.num_tokens - req.num_computed_tokens - len(cached) * self.cache.block_size
            if remaining > budget and not self.cfg.enable_chunked_prefill:
                break
            n = min(remaining, budget)
            if not self._start(out, req, cached, n):
                break  # nobody overtakes the head of the queue
            self.waiting.popleft()
            self.running.append(req)
            out.rows.append(ScheduledRow(req, self.phase_of(req, n), n, slot=len(out.rows),
                                         num_cached=len(cached) * self.cache.block_size))
            budget -= n

    def _release(self, request: Request) -> None:
        if not self.remove_waiting(request):
            self.running.remove(request)
        self.cache.free(request.request_id)
