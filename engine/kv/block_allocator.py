"""Physical KV block allocator: a free list with reference counts."""
from __future__ import annotations

from collections import deque


class OutOfBlocks(RuntimeError):
    pass


class BlockAllocator:
    """Hands out physical block ids in [0, num_blocks).

    A block is held while its reference count is above zero. `free` puts a block whose count drops to
    zero back on the free list (at the back, so recently used blocks are reused last); `release` only
    drops the counts and hands those blocks to the caller (the prefix cache keeps them evictable).
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
        """One more holder of a held block, or the first holder again of a released one that the caller
        kept off the free list (a cached block)."""
        self._refs[block] += 1

    def release(self, blocks: list[int]) -> list[int]:
        """Drop one reference from each block; returns those no longer held (not put on the free list)."""
        dropped = []
        for b in blocks:
            if self._refs[b] < 1:
                raise ValueError(f"double free of KV block {b}")
            self._refs[b] -= 1
            if self._refs[b] == 0:
                dropped.append(b)
        return dropped

    def put_free(self, blocks: list[int]) -> None:
        """Return released blocks (reference count zero) to the free list."""
        self._free.extend(blocks)

    def ref_count(self, block: int) -> int:
        return self._refs[block]
