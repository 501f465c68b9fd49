"""Prefix cache: full KV blocks found again by a hash chained over their parent block's hash and tokens.

A block's hash is SHA-256 over its parent's hash and its token ids, so equal hashes mean equal whole
prefixes (a crafted prompt cannot collide with someone else's prefix, as it could with Python's hash).
Only full blocks are hashed; a partial last block is never shared. Blocks that no request holds any more
stay here, evictable, least recently used first, until the pool needs them.
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence


def extend_block_hashes(hashes: list[bytes], tokens: Sequence[int], block_size: int) -> list[bytes]:
    """Extend `hashes` (of the leading full blocks of `tokens`, as far as known) to every full block."""
    parent = hashes[-1] if hashes else b""
    for i in range(len(hashes), len(tokens) // block_size):
        block = array("q", tokens[i * block_size:(i + 1) * block_size]).tobytes()
        parent = hashlib.sha256(parent + block).digest()
        hashes.append(parent)
    return hashes


class PrefixCache:
    """hash <-> physical block for full blocks, and the evictable ones (held by nobody) in LRU order."""

    def __init__(self):
        self._block_of: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._hash_of)

    def match(self, hashes: Sequence[bytes], limit: int) -> list[int]:
        """Blocks holding the longest cached prefix of `hashes`, at most `limit` of them."""
        out = []
        for h in hashes[:limit]:
            block = self._block_of.get(h)
            if block is None:
                break
            out.append(block)
        return out

    def register(self, block: int, h: bytes) -> None:
        """`block` now holds the full block hashed `h`, unless another block already does (then it stays
        private and goes back to the free list when released)."""
        if h not in self._block_of and block not in self._hash_of:
            self._block_of[h] = block
            self._hash_of[block] = h

    def keep(self, released: list[int]) -> list[int]:
        """Blocks nobody holds any more: cached ones become evictable (most recent last); returns the
        others, which go back to the free list."""
        uncached = []
        for b in released:
            if b in self._hash_of:
                self.evictable[b] = None
            else:
                uncached.append(b)
        return uncached

    def take(self, block: int) -> None:
        """A request holds `block` again: it is no longer evictable."""
        self.evictable.pop(block, None)

    def evict(self, n: int) -> list[int]:
        """Forget the n least recently used evictable blocks and return them."""
        out = []
        for _ in range(min(n, len(self.evictable))):
            block, _ = self.evictable.popitem(last=False)
            del self._block_of[self._hash_of.pop(block)]
            out.append(block)
        return out
