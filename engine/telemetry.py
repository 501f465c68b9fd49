"""StepEvent: what one engine iteration did, for views, benchmarks and tests.

Built once per step from state the engine already holds, so it stays cheap;
`to_dict()` (the websocket shape) is only paid by consumers that need JSON.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .events import PADDING, StepEntry, StepMessage

__all__ = ["StepEntry", "StepEvent"]


@dataclass
class StepEvent:
    step: int  # the iteration number: steps that computed or finished something, from 1 (LLMEngine.step)
    strategy: str
    t_start: float
    t_end: float
    entries: list[StepEntry]
    num_waiting: int
    num_running: int
    admitted: list[int]
    finished: list[int]
    preempted: list[int]
    tokens_used: int            # tokens computed this step (padding included)
    token_budget: int
    # KV cache
    num_blocks: int
    block_size: int
    used_blocks: int
    block_tables: dict[int, list[int]]  # request id -> physical block ids (every held block is in one)
    kv_tokens: dict[int, int]   # request id -> tokens stored in its blocks
    reserved_unused_slots: int  # slots held by requests but holding no token
    # new tokens sampled this step: request id -> token id
    sampled: dict[int, int] = field(default_factory=dict)
    # prefix caching: evictable cached blocks (held by nobody, least recently used first), and the
    # tokens of this step's admitted requests looked up in the cache and found there
    cached_blocks: list[int] = field(default_factory=list)
    prefix_queries: int = 0
    prefix_hits: int = 0
    # why requests wait (engine/scheduler/waits.py), as changes since the previous step: request id ->
    # its reason, or None once it no longer waits
    waits: dict[int, dict | None] = field(default_factory=dict)

    @property
    def block_owner(self) -> np.ndarray:
        """int32 [num_blocks]: the request holding each block, -1 when free (the tables' inverse,
        derived on demand so that a step pays nothing for it)."""
        owner = np.full(self.num_blocks, -1, dtype=np.int32)
        for rid, table in self.block_tables.items():
            owner[table] = rid  # a shared block shows one of its holders
        return owner

    @property
    def shared_blocks(self) -> dict[int, int]:
        """Block -> reference count, for the blocks more than one request holds (prefix caching)."""
        refs: dict[int, int] = {}
        for table in self.block_tables.values():
            for b in table:
                refs[b] = refs.get(b, 0) + 1
        return {b: n for b, n in refs.items() if n > 1}

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def num_padding_tokens(self) -> int:
        return sum(e.num_tokens for e in self.entries if e.phase == PADDING)

    def to_dict(self) -> dict:
        """Compact JSON-ready form (the websocket's shape). The derived block owners are left out: a
        list as long as the pool would make every event grow with the pool."""
        return {
            "type": StepMessage.TYPE,
            "step": self.step,
            "strategy": self.strategy,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "entries": [e.to_list() for e in self.entries],
            "num_waiting": self.num_waiting,
            "num_running": self.num_running,
            "admitted": self.admitted,
            "finished": self.finished,
            "preempted": self.preempted,
            "tokens_used": self.tokens_used,
            "token_budget": self.token_budget,
            "kv": {
                "num_blocks": self.num_blocks,
                "block_size": self.block_size,
                "used": self.used_blocks,
                "block_tables": {str(k): v for k, v in self.block_tables.items()},
                "kv_tokens": {str(k): v for k, v in self.kv_tokens.items()},
                "reserved_unused_slots": self.reserved_unused_slots,
                "cached": self.cached_blocks,
            },
            "prefix_queries": self.prefix_queries,
            "prefix_hits": self.prefix_hits,
            "sampled": {str(k): v for k, v in self.sampled.items()},
            "waits": {str(k): v for k, v in self.waits.items()},
        }
