"""DecodeBatch: a step whose every row is a plain decode row, its inputs built as arrays; on the CPU, written
in place into the tensors of the step before where it goes on from that one."""
from __future__ import annotations

from dataclasses import dataclass
from operator import is_
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..kv import KVCacheManager
from ..scheduler import ScheduledRow
from .attention import BatchMeta
from .packed_batch import (decode_groups, is_plain_decode, next_tokens, rows_in_order, send_batch, slots_at,
                           table_rows, tables_for)

if TYPE_CHECKING:
    from .runner import ModelRunner


def all_plain_decode(rows: list[ScheduledRow]) -> bool:
    """Every row is one decode token, sampled: no prefill chunk, padding or draft."""
    return all(map(is_plain_decode, rows))


class DecodeBatch:
    """The steady state of continuous batching: each row's last token at its next position, stored and
    sampled, its inputs kept as arrays, where PackedBatch appends to lists it converts later; the tensors sent
    are the same (a test builds both for random steps). A batch that goes on from the step before's (`last`,
    its tail: DecodeTail.goes_on_to) reuses its table-matrix rows and, on the CPU, its tensors (CpuDecodeInputs)."""

    prefills = ()
    has_drafts = False

    def __init__(self, runner: ModelRunner, cache: KVCacheManager, rows: list[ScheduledRow],
                 last: DecodeTail | None = None):
        self.runner, self.cache, self.sample_rows = runner, cache, rows
        self.requests = [r.request for r in rows]
        self.positions, self.ids = next_tokens(self.requests)
        goes_on = last is not None and last.goes_on_to(self)
        self.dec_row = last.dec_row if goes_on else table_rows(cache, self.requests)
        # slots and tables read from the table matrix: for a fresh batch, or where a row's position is the first
        # of a block (only there may its table have grown since the step before)
        self.regather = not goes_on or bool((self.positions % cache.block_size == 0).any())
        self.write_slots = slots_at(cache, self.dec_row, self.positions) if self.regather else \
            last.write_slots + 1  # (each the slot after its last, in the same block)
        self.dec_ctx = self.positions + 1
        self.dec_idx = self.sample_idx = last.dec_idx if goes_on else np.arange(len(rows), dtype=np.int64)
        # what the step after needs of this one; its inputs: the CPU tensors of the step before (written in
        # place at the upload), else made there
        self.tail = DecodeTail(cache, cache.tables.epoch, self.requests, self.dec_ctx, self.dec_row,
                               self.write_slots, self.dec_idx, last.inputs if goes_on else None)

    def decode_arrays(self) -> tuple[np.ndarray, ...]:
        """What the decode graphs stage (PackedBatch.decode_arrays): every token is stored."""
        return (self.ids, self.positions, self.write_slots, self.sample_idx, self.dec_ctx,
                tables_for(self.cache, self.dec_row, self.dec_ctx), self.dec_row)

    def sample_matrix_rows(self) -> np.ndarray:
        """The table-matrix row of each sampled token's request (every row samples, in order)."""
        return self.dec_row

    def upload(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, BatchMeta]:
        """What PackedBatch.upload sends for the same rows, from one copy. On the CPU without overlap the
        tensors are views of host arrays, kept for the next step to write in place where it goes on from this
        one (no new tensor or BatchMeta a step); the step before's are then this one's."""
        return self._cpu_inputs() or send_batch(
            self.runner, self.cache, (self.ids, self.positions, self.sample_idx, self.write_slots), None,
            self.dec_idx, self.dec_row, self.dec_ctx, ())

    def _cpu_inputs(self) -> tuple | None:
        runner, tail = self.runner, self.tail
        if runner.device.type != "cpu" or runner.last_tokens is not None:  # (overlap fills pending ids)
            return None
        if tail.inputs is None or not tail.inputs.write(self):
            tail.inputs = CpuDecodeInputs(self)
        return tail.inputs.sent


@dataclass(slots=True)
class DecodeTail:
    """What the step after a decode-only batch needs of it to go on from it. The runner keeps the last one
    (ModelRunner.last_decode): nothing here refers back to the runner, so a dropped engine is freed at once."""
    cache: KVCacheManager
    epoch: int
    requests: list
    next_positions: np.ndarray  # each row's position in the step after (its context in this one)
    dec_row: np.ndarray
    write_slots: np.ndarray
    dec_idx: np.ndarray
    inputs: CpuDecodeInputs | None

    def goes_on_to(self, nxt: DecodeBatch) -> bool:
        """nxt is this batch one token later: the same requests in the same order on the same cache, each
        one position further, and no table-matrix row taken or dropped since (TableMatrix.epoch: a request
        swapped out and in again between the two has other blocks). So their rows are the same, and their
        tables grew at most by the block a position that starts one brings."""
        return (nxt.cache is self.cache and self.cache.tables.epoch == self.epoch
                and len(nxt.requests) == len(self.requests) and all(map(is_, nxt.requests, self.requests))
                and np.array_equal(nxt.positions, self.next_positions))


class CpuDecodeInputs:
    """A decode-only batch's tensors on the CPU as views of host arrays (what send_batch sends there: decode
    rows longest first), which the step after writes in place when it goes on from that batch: its rows' order
    by length is the same (every context one longer), and its tables change only where a row's new position
    starts a block."""

    def __init__(self, batch: DecodeBatch):
        self.order = np.argsort(-batch.dec_ctx, kind="stable")
        self.ids, self.positions, self.slots = batch.ids.copy(), batch.positions.copy(), batch.write_slots.copy()
        self.ctx = batch.dec_ctx[self.order]
        self.tables = self._tables(batch)
        t, n = torch.from_numpy, len(self.ids)
        self.meta = BatchMeta(pool=batch.runner.pool, num_tokens=n, write_idx=None, write_slots=t(self.slots),
                              decode_idx=t(batch.dec_idx[self.order]), decode_blocks=t(self.tables),
                              decode_ctx=t(self.ctx), decode_groups=self._groups(batch.cache), prefills=[],
                              prefill_layout=torch.zeros((0, 3), dtype=torch.int64),
                              rows_in_order=rows_in_order(batch.dec_idx[self.order], self.ids))
        self.sent = (t(self.ids).view(1, -1), t(self.positions).view(1, -1), t(batch.sample_idx), self.meta)

    def _tables(self, batch: DecodeBatch) -> np.ndarray:
        return tables_for(batch.cache, batch.dec_row[self.order], self.ctx).astype(np.int64)

    def _groups(self, cache: KVCacheManager) -> list[tuple[int, int, int]]:
        return decode_groups(-(-self.ctx // cache.block_size))

    def write(self, batch: DecodeBatch) -> bool:
        """batch's inputs in place of the step before's (it goes on from that one); False where its tables
        are wider (then new tensors are made)."""
        if batch.regather and -(-int(batch.dec_ctx.max()) // batch.cache.block_size) != self.tables.shape[1]:
            return False
        self.ids[:], self.positions[:], self.slots[:] = batch.ids, batch.positions, batch.write_slots
        self.ctx[:] = batch.dec_ctx[self.order]
        if batch.regather:
            self.tables[:] = self._tables(batch)
            self.meta.decode_groups = self._groups(batch.cache)
        self.meta._masks.clear()  # (built from the contexts)
        self.meta.kernel_inputs = None  # (the Triton backend's, built from the tensors at the first layer)
        return True
