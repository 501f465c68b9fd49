"""Block tables: which physical blocks hold each request's KV, and who owns each block."""
from __future__ import annotations

import numpy as np

from .block_allocator import BlockAllocator


class KVCacheManager:
    """Grows and frees per-request block tables on top of a BlockAllocator.

    `owner[b]` is the request id holding physical block b, or -1 when free; it is
    kept up to date incrementally so telemetry can copy it instead of rebuilding it.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self.block_tables: dict[int, list[int]] = {}
        self.owner = np.full(num_blocks, -1, dtype=np.int32)

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free(self) -> int:
        return self.allocator.num_free

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, request_id: int, num_tokens: int) -> int:
        """Blocks still to allocate so the request's table covers num_tokens."""
        have = len(self.block_tables.get(request_id, ()))
        return max(0, self.blocks_for(num_tokens) - have)

    def can_allocate(self, request_id: int, num_tokens: int) -> bool:
        return self.num_new_blocks(request_id, num_tokens) <= self.allocator.num_free

    def allocate(self, request_id: int, num_tokens: int) -> bool:
        """Extend the request's table to cover num_tokens; False (and no change) if blocks run out."""
        need = self.num_new_blocks(request_id, num_tokens)
        if need > self.allocator.num_free:
            return False
        table = self.block_tables.setdefault(request_id, [])
        if need:
            new = self.allocator.allocate(need)
            table.extend(new)
            self.owner[new] = request_id
        return True

    def free(self, request_id: int) -> None:
        table = self.block_tables.pop(request_id, None)
        if table:
            self.allocator.free(table)
            self.owner[table] = -1

    def slot(self, request_id: int, position: int) -> int:
        """Flat slot index (block * block_size + offset) of one token position."""
        table = self.block_tables[request_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def slots(self, request_id: int, start: int, end: int) -> list[int]:
        table, bs = self.block_tables[request_id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]
