"""The block tables as rows of one array (a step gathers its decode rows' tables with one index), and as
lists a step event may keep (copied only when they changed)."""
from __future__ import annotations

import numpy as np


class TableMatrix:
    """Each request that holds device blocks has a row of an int32 array: its block table, then zeros.
    KVCacheManager writes it beside its lists (it is the only writer), so building a step's inputs
    reads the tables of hundreds of rows as one gather instead of a list per row. Rows and columns
    grow by doubling; a request's row is fixed while it holds blocks."""

    def __init__(self, rows: int = 64, cols: int = 16):
        self.array = np.zeros((rows, cols), dtype=np.int32)
        self.row: dict[int, int] = {}  # request id -> its row
        self._free = list(range(rows - 1, -1, -1))
        self._copies: dict[int, list[int]] = {}  # request id -> its table as the last copies() gave it
        # rows taken or dropped: while it stays the same each request keeps its row, and its table changes only
        # by blocks appended or cut past its next position (a draft's rejected tokens), which DecodeBatch's
        # step after reads as a new block where it starts one
        self.epoch = 0

    def copies(self, tables: dict[int, list[int]]) -> dict[int, list[int]]:
        """`tables` (the cache's lists) as lists a step event keeps: a table that has not changed since
        the last call is the list that call gave (a decode step changes one table in block_size), so
        callers must not mutate them."""
        kept = self._copies
        return {rid: kept.get(rid) or kept.setdefault(rid, list(t)) for rid, t in tables.items()}

    def write(self, request_id: int, start: int, blocks: list[int]) -> None:
        """Its table's entries start.. are now `blocks` (a new table, or blocks appended)."""
        if not blocks:
            return
        self._copies.pop(request_id, None)
        r = self.row.get(request_id)
        if r is None:
            r = self.row[request_id] = self._take_row()
            self.epoch += 1
        end = start + len(blocks)
        if end > self.array.shape[1]:
            self._grow(cols=max(end, 2 * self.array.shape[1]))
        self.array[r, start:end] = blocks

    def truncate(self, request_id: int, keep: int) -> None:
        """Its table keeps its first `keep` blocks (none: its row goes)."""
        if keep == 0:
            return self.drop(request_id)
        self._copies.pop(request_id, None)
        r = self.row.get(request_id)
        if r is not None:
            self.array[r, keep:] = 0

    def drop(self, request_id: int) -> None:
        """It holds no blocks any more: its row is zeroed and free."""
        self._copies.pop(request_id, None)
        r = self.row.pop(request_id, None)
        if r is not None:
            self.epoch += 1
            self.array[r] = 0
            self._free.append(r)

    def _take_row(self) -> int:
        if not self._free:
            rows = self.array.shape[0]
            self._grow(rows=2 * rows)
            self._free = list(range(2 * rows - 1, rows - 1, -1))
        return self._free.pop()

    def _grow(self, rows: int | None = None, cols: int | None = None) -> None:
        old = self.array
        self.array = np.zeros((rows or old.shape[0], cols or old.shape[1]), dtype=np.int32)
        self.array[:old.shape[0], :old.shape[1]] = old
