"""Static and dynamic batching: the request-level baseline that continuous batching replaces.

A batch launches (static: when static_batch_size requests wait; dynamic: also
when the oldest has waited static_max_wait_s), takes its rows from the waiting
queue in policy order, reserves each row's KV for prompt + max_tokens up
front, prefills every row padded to the longest prompt (the part of it
that the prefix cache does not hold, when prefix caching is on),
then decodes every row each step until its longest request finishes. Rows that
finish early keep their slot and their KV and are still computed (as pad
tokens) until then; nobody joins mid-batch. This is what generate() does on a
padded batch. A presenter may launch a partial batch by hand (launch_now), and
every waiting request is told why it waits (out.waits). With speculative decoding
a decoding row drafts within its reservation.
"""
from __future__ import annotations

from ..events import PADDING, PREFILL
from ..request import Request
from . import waits
from .base import ScheduledRow, Scheduler, SchedulerOutput


class StaticScheduler(Scheduler):
    def __init__(self, cfg, cache, clock, dynamic: bool = False):
        super().__init__(cfg, cache, clock)
        self.dynamic = dynamic
        self.batch: list[Request] = []  # the launched batch, in row order; equals `running`
        self.launch_now = False  # the presenter's "launch it as it is": the next schedule launches what waits

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        head = None
        if self.batch:
            self._decode(out)
        elif self._should_launch():
            head = self._launch(out)
        self.launch_now = self.launch_now and bool(self.waiting)  # a launch asked of an empty queue lapses
        common = self._why_waiting()
        self._explain(out, head or common, common)
        return out

    def _decode(self, out: SchedulerOutput) -> None:
        for slot, req in enumerate(self.batch):
            if req.is_finished:
                out.rows.append(ScheduledRow(req, PADDING, 0, num_pad=1, slot=slot))
            else:
                out.rows.append(ScheduledRow(req, self.phase_of(req, 1), 1, slot=slot))
                if self.cfg.speculative != "off":
                    self._draft(out.rows[-1], self.cfg.num_speculative_tokens)  # in its reserved blocks

    def _should_launch(self) -> bool:
        n = len(self.waiting)
        if n == 0:
            return False
        if n >= self.cfg.static_batch_size or self.draining or self.launch_now:
            return True
        return self.dynamic and self.clock() >= self._launch_at()

    def _launch_at(self) -> float:
        """When dynamic batching launches however full: the oldest request's arrival + static_max_wait_s."""
        return min(r.arrival_s for r in self.waiting) + self.cfg.static_max_wait_s

    def _why_waiting(self) -> dict | None:
        """Why the waiting requests wait after this step's decision (None: nobody waits)."""
        if not self.waiting:
            return None
        if self.batch:
            return waits.batch_running(len(self.batch))
        return waits.batch_filling(len(self.waiting), self.cfg.static_batch_size,
                                   self._launch_at() if self.dynamic else None)

    def _launch(self, out: SchedulerOutput) -> dict | None:
        """Launch a batch from the head of the queue; returns why the head was left out (None: it was not)."""
        self.launch_now = False
        self._order_waiting()
        head = None
        while self.waiting and len(self.batch) < self.cfg.static_batch_size:
            req = self.waiting[0]
            cached = self._cached_prefix(req)
            rest = req.max_total_tokens - len(cached) * self.cache.block_size
            if not self._start(out, req, cached, rest):
                head = self._kv_short(req, cached, rest)  # the reservation does not fit: the next batch
                break
            self.waiting.popleft()
            self.batch.append(req)
        self.running = self.batch
        if self.batch:
            self._prefill(out)
        return head

    def _prefill(self, out: SchedulerOutput) -> None:
        # Every row prefills what the prefix cache did not hold, left-padded to the longest such part
        # (at launch a row's computed tokens are exactly its cache hit).
        longest = max(r.num_tokens - r.num_computed_tokens for r in self.batch)
        for slot, req in enumerate(self.batch):
            n = req.num_tokens - req.num_computed_tokens
            out.rows.append(ScheduledRow(req, PREFILL, n, num_pad=longest - n, slot=slot,
                                         num_cached=req.num_computed_tokens))

    def _drop_rejected(self, request: Request) -> None:
        """Nothing: the row's reservation (prompt + max_tokens) holds until its batch ends."""

    def _release(self, request: Request) -> None:
        # A finished row keeps its slot and KV until the whole batch is done.
        if request not in self.batch:
            self.remove_waiting(request)
            self.cache.free(request.request_id)

    def on_step_done(self) -> None:
        if self.batch and all(r.is_finished for r in self.batch):
            for r in self.batch:
                self.cache.free(r.request_id)
            self.batch = []
            self.running = self.batch

    def has_work(self) -> bool:
        return bool(self.waiting or self.batch)
