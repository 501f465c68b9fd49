"""DecodeBatch: a step whose every row is a plain decode row, its inputs built as arrays."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..kv import KVCacheManager
from ..scheduler import ScheduledRow
from .attention import BatchMeta
from .packed_batch import decode_reads, is_plain_decode, send_batch, tables_for

if TYPE_CHECKING:
    from .runner import ModelRunner


def all_plain_decode(rows: list[ScheduledRow]) -> bool:
    """Every row is one decode token, sampled: no prefill chunk, padding or draft."""
    return all(map(is_plain_decode, rows))


class DecodeBatch:
    """The steady state of continuous batching: each row's last token at its next position, stored and
    sampled, its inputs kept as the arrays decode_reads gives, where PackedBatch appends to lists it converts
    later; the tensors sent are the same (a test builds both for random steps)."""

    prefills = ()
    has_drafts = False

    def __init__(self, runner: ModelRunner, cache: KVCacheManager, rows: list[ScheduledRow]):
        self.runner, self.cache, self.sample_rows = runner, cache, rows
        self.positions, self.ids, self.dec_row, self.write_slots = decode_reads(cache, rows)
        self.dec_ctx = self.positions + 1
        self.dec_idx = self.sample_idx = np.arange(len(rows), dtype=np.int64)  # token i is row i, each sampled

    def decode_arrays(self) -> tuple[np.ndarray, ...]:
        """What the decode graphs stage (PackedBatch.decode_arrays): every token is stored."""
        return (self.ids, self.positions, self.write_slots, self.sample_idx, self.dec_ctx,
                tables_for(self.cache, self.dec_row, self.dec_ctx), self.dec_row)

    def sample_matrix_rows(self) -> np.ndarray:
        """The table-matrix row of each sampled token's request (every row samples, in order)."""
        return self.dec_row

    def upload(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, BatchMeta]:
        """What PackedBatch.upload sends for the same rows, from one copy."""
        return send_batch(self.runner, self.cache, (self.ids, self.positions, self.sample_idx, self.write_slots),
                          None, self.dec_idx, self.dec_row, self.dec_ctx, ())
