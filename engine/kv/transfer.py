"""Block transfer: whole KV blocks copied from one pool to another, timed and counted.

One mechanism for every move of KV between pools: swap preemption (device pool <-> host pool), and a
disaggregated lane's hand-off (the prefill engine's pool -> the decode engine's). A model with a draft model has a pool pair
per model; a transfer moves the same block ids in each.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..events import HANDOFF, SWAP_IN, SWAP_OUT
from .pool import KVPool

__all__ = ["HANDOFF", "SWAP_IN", "SWAP_OUT", "BlockMove", "Transfer", "copy_blocks", "run_move"]


@dataclass
class BlockMove:
    """A request's blocks to copy, src[i] -> dst[i], in the order the scheduler decided them."""
    direction: str
    request_id: int
    src: list[int]
    dst: list[int]


@dataclass
class Transfer:
    """What a list of moves copied: blocks, bytes (every pool, every layer's K and V) and seconds."""
    blocks: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, other: Transfer) -> None:
        self.blocks += other.blocks
        self.bytes += other.bytes
        self.seconds += other.seconds


def copy_blocks(pairs: list[tuple[KVPool, KVPool]], src: list[int], dst: list[int]) -> int:
    """Copy blocks src[i] of each pair's first pool into blocks dst[i] of its second; returns the bytes."""
    copied = 0
    for a, b in pairs:
        si = torch.tensor(src, dtype=torch.long, device=a.k[0].device)
        di = torch.tensor(dst, dtype=torch.long, device=b.k[0].device)
        for s, d in zip(a.k + a.v, b.k + b.v):
            block = s.index_select(0, si)
            d.index_copy_(0, di, block.to(d.device))
            copied += block.numel() * block.element_size()
    return copied


def run_move(m: BlockMove, device: list[KVPool], other: list[KVPool]) -> Transfer:
    """Copy one move's blocks between each device pool and its counterpart in `other` (the host pool;
    for a hand-off, the prefill engine's pool: the source); what it copied, timed. A step's moves run
    in the scheduler's order: a block one move frees may be the next one's destination."""
    t0 = time.perf_counter()
    pairs = list(zip(device, other)) if m.direction == SWAP_OUT else list(zip(other, device))
    nbytes = copy_blocks(pairs, m.src, m.dst)
    if device[0].k[0].device.type == "cuda":
        torch.cuda.synchronize(device[0].k[0].device)
    return Transfer(len(m.src), nbytes, time.perf_counter() - t0)
