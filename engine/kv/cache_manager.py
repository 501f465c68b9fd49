"""Block tables: which physical blocks hold each request's KV."""
from __future__ import annotations

from .block_allocator import BlockAllocator


class KVCacheManager:
    """Grows and frees per-request block tables on top of a BlockAllocator."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self.block_tables: dict[int, list[int]] = {}

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

    def allocate(self, request_id: int, num_tokens: int) -> bool:
        """Extend the request's table to cover num_tokens; False (and no change) if blocks run out."""
        need = self.num_new_blocks(request_id, num_tokens)
        if need > self.allocator.num_free:
            return False
        table = self.block_tables.setdefault(request_id, [])
        if need:
            table.extend(self.allocator.allocate(need))
        return True

    def free(self, request_id: int) -> None:
        table = self.block_tables.pop(request_id, None)
        if table:
            self.allocator.free(table)

    def slots(self, request_id: int, start: int, end: int) -> list[int]:
        table, bs = self.block_tables[request_id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]
