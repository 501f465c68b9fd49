"""Physical KV block allocator: a free list with reference counts."""
from __future__ import annotations

from collections import deque


class OutOfBlocks(RuntimeError):
    pass


class BlockAllocator:
    """Hands out physical block ids in [0, num_blocks).

    A block returns to the free list when its reference count drops to zero.
    Freed blocks go to the back, so recently used blocks are reused last.
    """

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._refs = [0] * num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocks(f"asked for {n} KV blocks, {len(self._free)} free")
        out = [self._free.popleft() for _ in range(n)]
        for b in out:
            self._refs[b] = 1
        return out

    def incref(self, block: int) -> None:
        if self._refs[block] < 1:
            raise ValueError(f"block {block} is free; cannot share it")
        self._refs[block] += 1

    def free(self, blocks: list[int]) -> None:
        for b in blocks:
            if self._refs[b] < 1:
                raise ValueError(f"double free of KV block {b}")
            self._refs[b] -= 1
            if self._refs[b] == 0:
                self._free.append(b)

    def ref_count(self, block: int) -> int:
        return self._refs[block]
