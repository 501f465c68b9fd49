"""BlockMover: one engine's KV block copies (swap preemption's, a disaggregated hand-off's) and their totals."""
from __future__ import annotations

import torch

from ..config import EngineConfig
from ..device_memory import GiB, check_kv_fits
from .pool import KVPool, KVShape
from .sizing import kv_block_bytes
from .transfer import HANDOFF, SWAP_IN, SWAP_OUT, BlockMove, Transfer, run_move


class BlockMover:
    """The pools an engine copies whole blocks between: its device pools (the model's, then its draft
    model's), the host pools beside them (swap preemption), and, on a disaggregated lane's decode half,
    the prefill half's device pools (`senders`: a hand-off's source). `moved`: what each direction copied
    since the engine was made."""

    def __init__(self, device: list[KVPool], host: list[KVPool]):
        self.device, self.host = device, host
        self.senders: list[KVPool] = []
        self.moved = {SWAP_OUT: Transfer(), SWAP_IN: Transfer(), HANDOFF: Transfer()}

    @property
    def num_host_blocks(self) -> int:
        return self.host[0].num_blocks if self.host else 0

    def run(self, moves: list[BlockMove]) -> tuple[Transfer, list[list]]:
        """A step's moves in the scheduler's order, before the forward writes any block they read: what the
        swaps copied, and each hand-off as [request id, blocks, bytes, seconds]."""
        swapped, handoffs = Transfer(), []
        for m in moves:
            done = run_move(m, self.device, self.senders if m.direction == HANDOFF else self.host)
            self.moved[m.direction].add(done)
            if m.direction == HANDOFF:
                handoffs.append([m.request_id, done.blocks, done.bytes, done.seconds])
            else:
                swapped.add(done)
        return swapped, handoffs


def host_pools(cfg: EngineConfig, shapes: list[KVShape], dtype: torch.dtype) -> list[KVPool]:
    """Swap preemption: a host pool beside each device pool of `shapes`, swap_space_gb for them all (none
    without swap). A pool that does not fit the host's memory raises, naming the field."""
    if cfg.preemption_mode != "swap":
        return []
    per_block = kv_block_bytes(cfg, shapes, dtype)
    n = int(cfg.swap_space_gb * GiB // per_block)
    if n < 1:
        raise ValueError(f"EngineConfig.swap_space_gb={cfg.swap_space_gb} holds no KV block ({per_block} bytes)")
    check_kv_fits(n * per_block, torch.device("cpu"), f"EngineConfig.swap_space_gb={cfg.swap_space_gb:g}: "
                  "the host pool", "lower swap_space_gb")
    return [KVPool(shape, n, cfg.block_size, dtype, torch.device("cpu")) for shape in shapes]
