"""Block tables: which physical blocks hold each request's KV (shared through the prefix cache)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .block_allocator import BlockAllocator
from .pool import blocks_for
from .prefix_cache import PrefixCache, extend_block_hashes
from .table_matrix import TableMatrix

if TYPE_CHECKING:
    from ..request import Request


class KVCacheManager:
    """Grows and frees per-request block tables on top of a BlockAllocator.

    With prefix caching, a request's table may start with blocks it shares with others (reference
    counts), and blocks nobody holds stay cached until the pool needs them: `num_free` counts those
    evictable blocks as free."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False, num_host_blocks: int = 0):
        self.block_size = block_size
        self.allocator = BlockAllocator(num_blocks)
        self.block_tables: dict[int, list[int]] = {}
        self.tables = TableMatrix()  # the same tables as rows of one array (what a step's inputs gather)
        # swap preemption: a host pool's blocks, and the tables of the requests swapped out to it
        self.host = BlockAllocator(num_host_blocks) if num_host_blocks else None
        self.host_tables: dict[int, list[int]] = {}
        # a disaggregated lane's decode half: requests whose KV is still in the prefill engine's pool
        # (those blocks, there), and the requests whose blocks there it no longer needs (copied, or the
        # request ended first): the prefill engine frees them (engine/disaggregated.py)
        self.incoming: dict[int, list[int]] = {}
        self.returned: list[int] = []
        self.prefix = PrefixCache() if prefix_caching else None
        self._cached_list: tuple[int, list[int]] = (-1, [])  # (prefix.version, its evictable blocks)

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free(self) -> int:
        return self.allocator.num_free + (len(self.prefix.evictable) if self.prefix is not None else 0)

    @property
    def cached_blocks(self) -> list[int]:
        """Evictable cached blocks, least recently used first. The same list while they stay the same
        (every step event carries it: a pool of cached blocks is not copied per step); never mutate it."""
        if self.prefix is None:
            return []
        if self._cached_list[0] != self.prefix.version:
            self._cached_list = (self.prefix.version, list(self.prefix.evictable))
        return self._cached_list[1]

    def blocks_for(self, num_tokens: int) -> int:
        return blocks_for(num_tokens, self.block_size)

    def num_new_blocks(self, request_id: int, num_tokens: int) -> int:
        """Blocks still to allocate so the request's table covers num_tokens."""
        have = len(self.block_tables.get(request_id, ()))
        return max(0, self.blocks_for(num_tokens) - have)

    # ---- prefix caching ----------------------------------------------------------------------
    def match(self, request: Request) -> list[int]:
        """Cached blocks holding the request's leading full blocks (none without prefix caching). The
        last token is never served from the cache: its logits must be computed."""
        if self.prefix is None:
            return []
        tokens = request.all_token_ids
        hashes = extend_block_hashes(request.block_hashes, tokens, self.block_size)
        return self.prefix.match(hashes, (len(tokens) - 1) // self.block_size)

    def commit(self, request: Request) -> None:
        """The request's KV now covers num_computed_tokens: cache its newly full blocks."""
        if self.prefix is None:
            return
        full = request.num_computed_tokens // self.block_size
        if full <= request.num_committed_blocks:
            return
        table = self.block_tables[request.request_id]
        hashes = extend_block_hashes(request.block_hashes, request.all_token_ids, self.block_size)
        for i in range(request.num_committed_blocks, full):
            self.prefix.register(table[i], hashes[i])
        request.num_committed_blocks = full

    def blocks_to_start(self, num_tokens: int, cached: list[int]) -> int:
        """Free blocks (evictable ones included) that starting a table of num_tokens on `cached` takes."""
        return max(0, self.blocks_for(num_tokens) - len(cached)) + self._revived(cached)

    def _revived(self, cached: list[int]) -> int:
        """Cached blocks that nobody holds: taking them uses up evictable (free) blocks."""
        return sum(1 for b in cached if self.allocator.ref_count(b) == 0)

    # ---- tables ------------------------------------------------------------------------------
    def allocate(self, request_id: int, num_tokens: int, cached: list[int] = ()) -> bool:
        """Extend the request's table to cover num_tokens, starting a new table with the `cached`
        blocks from match(); False (and no change) if blocks run out."""
        table = self.block_tables.get(request_id)
        if table is not None and not cached and len(table) * self.block_size >= num_tokens:
            return True  # most decode steps: the last block has room
        if cached and table is not None:
            raise ValueError(f"request {request_id} already has a block table; cached blocks start one")
        if cached:
            need = max(0, self.blocks_for(num_tokens) - len(cached))
            if self.blocks_to_start(num_tokens, cached) > self.num_free:
                return False
        else:
            need = self.num_new_blocks(request_id, num_tokens)
            if need > self.num_free:
                return False
        for b in cached:
            self.prefix.take(b)
            self.allocator.incref(b)
        table = self.block_tables.setdefault(request_id, list(cached))
        self.tables.write(request_id, 0, cached)
        if need:
            short = need - self.allocator.num_free
            if short > 0:
                self.allocator.put_free(self.prefix.evict(short))
            new = self.allocator.allocate(need)
            self.tables.write(request_id, len(table), new)
            table.extend(new)
        return True

    def free(self, request_id: int) -> None:
        """Release the request's blocks, on the device and (swapped out) on the host."""
        self._release(self.block_tables.pop(request_id, None))
        self.tables.drop(request_id)
        host = self.host_tables.pop(request_id, None)
        if host:
            self.host.put_free(self.host.release(host))
        if self.incoming.pop(request_id, None) is not None:
            self.returned.append(request_id)

    # ---- swap preemption ---------------------------------------------------------------------
    def swap_out(self, request_id: int, num_tokens: int) -> tuple[list[int], list[int]] | None:
        """Move the blocks holding the request's first num_tokens to host blocks and release its table:
        (device blocks, host blocks) to copy, in order, before anything writes the device blocks again;
        None (and no change) when there is nothing to move or the host pool lacks room."""
        table = self.block_tables.get(request_id, [])[:self.blocks_for(num_tokens)]
        if self.host is None or not table or len(table) > self.host.num_free:
            return None
        self._release(self.block_tables.pop(request_id))  # shared and cached blocks stay with the prefix cache
        self.tables.drop(request_id)
        host = self.host_tables[request_id] = self.host.allocate(len(table))
        return table, host

    def swap_in(self, request_id: int, num_tokens: int) -> tuple[list[int], list[int]] | None:
        """Bring a swapped-out request back into fresh device blocks covering num_tokens: (host blocks,
        device blocks) to copy; None (and no change) when the free blocks do not hold them."""
        host = self.host_tables[request_id]
        if not self.allocate(request_id, num_tokens):
            return None
        del self.host_tables[request_id]
        self.host.put_free(self.host.release(host))
        return host, self.block_tables[request_id][:len(host)]

    # ---- a disaggregated lane's hand-off --------------------------------------------------------
    def take_incoming(self, request_id: int, num_tokens: int) -> tuple[list[int], list[int]] | None:
        """Fresh blocks covering num_tokens for a request whose KV is in the prefill engine's pool: (its
        blocks there, blocks here) to copy; None (and no change) when the free blocks do not hold them."""
        src = self.incoming[request_id]
        if not self.allocate(request_id, num_tokens):
            return None
        del self.incoming[request_id]
        self.returned.append(request_id)  # released there once this step's copies ran
        return src, self.block_tables[request_id][:len(src)]

    def trim(self, request_id: int, num_tokens: int) -> None:
        """Shrink the request's table to the blocks num_tokens need (speculative decoding: the blocks
        that held only rejected draft tokens go back)."""
        table = self.block_tables[request_id]
        keep = self.blocks_for(num_tokens)
        if len(table) > keep:
            self._release(table[keep:])
            del table[keep:]
            self.tables.truncate(request_id, keep)

    def _release(self, table: list[int] | None) -> None:
        if not table:
            return
        released = self.allocator.release(table)
        if self.prefix is not None:  # the deepest blocks first: they are evicted before the prefix they extend
            released = self.prefix.keep(released[::-1])
        self.allocator.put_free(released)

    def slots(self, request_id: int, start: int, end: int) -> list[int]:
        table, bs = self.block_tables[request_id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, end)]
