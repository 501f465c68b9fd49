"""StepEventBuilder: one engine step's StepEvent, from what its scheduler decided and what the step did."""
from __future__ import annotations

from dataclasses import dataclass, field

from .config import EngineConfig
from .events import PADDING, StepEntry, StepEvent
from .kv.transfer import Transfer
from .scheduler import Scheduler, SchedulerOutput
from .scheduler.waits import changes


@dataclass(slots=True)
class StepDone:
    """What a step did beside scheduling: its sampled token per request, the answers its model ended under
    ignore_eos (request id -> text length there), what swaps copied, each hand-off's copy, the requests it
    ended and those it handed on with the KV tokens their held blocks hold (a prefill half's)."""
    sampled: dict[int, int] = field(default_factory=dict)
    answer_ends: dict[int, int] = field(default_factory=dict)
    swapped: Transfer = field(default_factory=Transfer)
    handoffs: list[list] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    handed_off: list[int] = field(default_factory=list)
    held_for_copy: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class StepState:
    """What the scheduler and the KV cache hold once a step's tokens are counted: its rows as the event shows
    them, the block tables (device and host), each running request's KV tokens, the queue and block counts."""
    entries: list[StepEntry]
    tables: dict[int, list[int]]
    kv_tokens: dict[int, int]
    num_waiting: int
    num_running: int
    used_blocks: int
    cached_blocks: list[int]
    host_tables: dict[int, list[int]]
    num_host_blocks: int


class StepEventBuilder:
    """Builds an engine's step events; holds the wait reasons the last one reported (an event carries only
    their changes). A reset engine makes a new one."""

    def __init__(self, cfg: EngineConfig, host_same_ram: bool, num_blocks: int):
        self.strategy, self.block_size, self.budget = cfg.strategy, cfg.block_size, cfg.max_num_batched_tokens
        self.num_blocks = num_blocks
        self.host_same_ram = host_same_ram
        self.waits: dict[int, dict] = {}  # every waiting request -> why, as the last event reported

    @staticmethod
    def snapshot(sched: SchedulerOutput, scheduler: Scheduler) -> StepState:
        """The state a step's event shows, as the scheduler and cache hold it now: when the step is built
        (its tokens read back), or with overlap as soon as they are counted (before the next step is scheduled)."""
        cache = scheduler.cache
        # Every block holder is in the scheduler's running set (static: finished rows included), or held for
        # a hand-off's copy (added when the event is built). Unchanged tables are not copied again.
        return StepState(entries(sched), cache.tables.copies(cache.block_tables),
                         {r.request_id: r.num_computed_tokens for r in scheduler.running},
                         scheduler.num_waiting, scheduler.num_running, cache.num_blocks - cache.num_free,
                         cache.cached_blocks, {rid: list(t) for rid, t in cache.host_tables.items()},
                         cache.host.num_blocks if cache.host else 0)

    def build(self, step: int, sched: SchedulerOutput, state: StepState, done: StepDone, t_start: float,
              t_end: float) -> StepEvent:
        kv_tokens = {**state.kv_tokens, **done.held_for_copy} if done.held_for_copy else state.kv_tokens
        held = sum(map(len, state.tables.values())) * self.block_size
        waits, self.waits = changes(self.waits, sched.waits), sched.waits
        return StepEvent(
            step=step, strategy=self.strategy, t_start=t_start, t_end=t_end, entries=state.entries,
            num_waiting=state.num_waiting, num_running=state.num_running, admitted=sched.admitted,
            finished=done.finished, preempted=sched.preempted, tokens_used=sched.num_tokens,
            token_budget=self.budget if sched.token_budget is None else sched.token_budget,
            num_blocks=self.num_blocks, block_size=self.block_size, used_blocks=state.used_blocks,
            block_tables=state.tables, kv_tokens=kv_tokens, reserved_unused_slots=held - sum(kv_tokens.values()),
            sampled=done.sampled, answer_ends=done.answer_ends, cached_blocks=state.cached_blocks,
            prefix_queries=sched.prefix_queries, prefix_hits=sched.prefix_hits, waits=waits,
            swaps=[[m.request_id, m.direction, len(m.src)] for m in sched.moves], swap_bytes=done.swapped.bytes,
            swap_s=done.swapped.seconds, num_host_blocks=state.num_host_blocks, host_tables=state.host_tables,
            host_same_ram=self.host_same_ram, handed_off=done.handed_off, handoffs=done.handoffs,
        )


def entries(sched: SchedulerOutput) -> list[StepEntry]:
    """Each row's real tokens, then its padding, as the event's entries."""
    out = []
    for row in sched.rows:
        req = row.request
        if row.num_new:
            out.append(StepEntry(req.request_id, row.phase, row.num_new, req.num_computed_tokens, row.slot,
                                 row.num_cached, len(row.draft), row.accepted))
        if row.num_pad:
            out.append(StepEntry(req.request_id, PADDING, row.num_pad, req.num_computed_tokens, row.slot))
    return out
