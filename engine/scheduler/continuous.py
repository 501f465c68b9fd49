"""Iteration-level (continuous) scheduling with chunked prefill and preemption (by recompute or swap)."""
from __future__ import annotations

from ..events import DECODE
from ..request import Request
from . import waits
from .base import ScheduledRow, Scheduler, SchedulerOutput


class ContinuousScheduler(Scheduler):
    """Every iteration: running requests first (decodes and unfinished prefill chunks, in policy
    order), then waiting requests join, in policy order, while a batch slot, the token budget and
    free KV blocks allow. When blocks run out, the last running request in policy order (fcfs: the
    newest) is preempted: its blocks are freed and it recomputes later, or (preemption_mode "swap")
    they are copied to the host pool and back when it resumes. Under the priority policy
    a waiting request that cannot start also preempts running requests of strictly worse priority.
    With speculative decoding, decode rows then bring draft tokens (ngram.py) in what budget
    and free blocks are left. Every request left waiting gets the reason from this step's decisions
    (out.waits)."""

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(t_scheduled=self.clock())
        self.running = self.policy.order(self.running, out.t_scheduled)
        self._preempt_for_waiting(out)
        budget = out.token_budget = self.policy.step_budget(self.cfg.max_num_batched_tokens, self.running)
        short = len(out.preempted)
        budget = self._schedule_running(out, budget)
        # admission, unless blocks ran short for the running ones
        head = self._admit(out, budget) if len(out.preempted) == short else self._head_kv_short()
        self._explain(out, head)
        self._speculate(out)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """The running requests' rows, in order, while the budget lasts; returns the budget left. A decode
        row whose last block has room for its token takes no more than a row (most rows, most steps)."""
        rows, running, tables, bs = out.rows, self.running, self.cache.block_tables, self.cache.block_size
        lookahead = self.lookahead
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            if lookahead and len(req.output_token_ids) >= req.params.max_tokens:
                i += 1  # its last token is pending: it ends when the step that samples it settles
                continue
            done, left = req.num_computed_tokens, len(req.prompt_token_ids) + len(req.output_token_ids)
            if left - done == 1 and req.output_token_ids and len(tables.get(req.request_id, ())) * bs > done:
                rows.append(ScheduledRow(req, DECODE, 1, slot=len(rows)))
                n = 1
            else:
                n = min(left - done, budget)
                if not self._grow(req, n, out):
                    break  # req itself was preempted: it was the last, nothing follows
                rows.append(ScheduledRow(req, self.phase_of(req, n), n, slot=len(rows)))
            budget -= n
            i += 1
        return budget

    def _grow(self, req: Request, n: int, out: SchedulerOutput) -> bool:
        """Make room for n more tokens of req, preempting the last running requests if needed."""
        while not self.cache.allocate(req.request_id, req.num_computed_tokens + n):
            victim = self.running[-1]
            self._preempt_last(out, waits.preempted_for_blocks(None if victim is req else req.request_id))
            if victim is req:
                return False
        return True

    def _speculate(self, out: SchedulerOutput) -> None:
        """Decode rows draft with what the step leaves once everyone is scheduled: the token
        budget after admission and the free blocks. A draft never preempts or delays anyone."""
        if self.cfg.speculative == "off":
            return
        spare = out.token_budget - out.num_tokens
        for row in out.rows:
            if spare <= 0:
                return
            self._draft(row, spare)
            spare -= len(row.draft)

    def _preempt_last(self, out: SchedulerOutput, why: dict) -> Request:
        victim = self.running.pop()
        self._preempt(out, victim, why)
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
            victim = self.running[-1]
            self._preempt_last(out, waits.preempted_by_priority(head.request_id, head.priority, victim.priority))
        self._order_waiting()  # the victims queue behind the head

    def _could_start(self, req: Request) -> bool:
        cached = self._cached_prefix(req)
        hit = len(cached) * self.cache.block_size
        first_chunk = min(req.num_tokens - req.num_computed_tokens - hit, self.cfg.max_num_batched_tokens)
        return (len(self.running) < self.cfg.max_num_seqs and self.cache.blocks_to_start(
            req.num_computed_tokens + hit + first_chunk, cached) <= self.cache.num_free)

    def _admit(self, out: SchedulerOutput, budget: int) -> dict | None:
        """Waiting requests join in policy order while they can; returns why the head of the queue waits
        (None: nobody waits). Nobody overtakes the head."""
        while self.waiting:
            if len(self.running) >= self.cfg.max_num_seqs:
                return waits.batch_full(len(self.running), self.cfg.max_num_seqs)
            if budget <= 0:
                return waits.token_budget(0, out.token_budget)
            req = self.waiting[0]
            if req.token_pending:  # preempted by this step
                return self.preempted_why.get(req.request_id)
            cached = self._cached_prefix(req)
            remaining = req.num_tokens - req.num_computed_tokens - len(cached) * self.cache.block_size
            if remaining > budget and not self.cfg.enable_chunked_prefill:
                return waits.token_budget(budget, out.token_budget)
            n = min(remaining, budget)
            if not self._start(out, req, cached, n):
                return self._kv_short(req, cached, n)
            self._join(out, req, n, len(cached) * self.cache.block_size)
            budget -= n
        return None

    def _join(self, out: SchedulerOutput, req: Request, n: int, hit: int) -> None:
        self.waiting.popleft()
        self.running.append(req)
        out.rows.append(ScheduledRow(req, self.phase_of(req, n), n, slot=len(out.rows), num_cached=hit))

    def _head_kv_short(self) -> dict | None:
        """The head's reason when the running requests took every block this step."""
        if not self.waiting:
            return None
        req = self.waiting[0]
        cached = self._cached_prefix(req)
        first = min(req.num_tokens - req.num_computed_tokens - len(cached) * self.cache.block_size,
                    self.cfg.max_num_batched_tokens)
        return self._kv_short(req, cached, first)

    def _release(self, request: Request) -> None:
        if not self.remove_waiting(request):
            self.running.remove(request)
        self.cache.free(request.request_id)
