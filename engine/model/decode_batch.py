"""DecodeBatch: a step whose every row is a plain decode row, its inputs built as arrays."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..events import DECODE
from ..kv import KVCacheManager
from ..scheduler import ScheduledRow
from .attention import BatchMeta
from .packed_batch import send_batch, tables_for

if TYPE_CHECKING:
    from .runner import ModelRunner


def all_plain_decode(rows: list[ScheduledRow]) -> bool:
    """Every row is one decode token, sampled: no prefill chunk, padding or draft."""
    return all(r.num_new == 1 and r.phase == DECODE and not r.num_pad for r in rows)


class DecodeBatch:
    """The steady state of continuous batching: each row's last token at its next position, stored and
    sampled. Three reads a row (position, last token, table matrix row), then NumPy for the rest, where
    PackedBatch appends token by token to lists it converts later; the tensors sent are the same
    (a test builds both for random steps)."""

    prefills = ()
    has_drafts = False

    def __init__(self, runner: ModelRunner, cache: KVCacheManager, rows: list[ScheduledRow]):
        self.runner, self.cache, self.sample_rows = runner, cache, rows
        reqs = [r.request for r in rows]
        row_of, bs = cache.tables.row, cache.block_size
        self.positions = p = np.array([q.num_computed_tokens for q in reqs], dtype=np.int64)
        self.ids = np.array([q.output_token_ids[-1] for q in reqs], dtype=np.int64)
        self.dec_row = np.array([row_of[q.request_id] for q in reqs], dtype=np.intp)
        self.write_slots = cache.tables.array[self.dec_row, p // bs].astype(np.int64) * bs + p % bs
        self.dec_ctx = p + 1
        self.dec_idx = self.sample_idx = np.arange(len(rows), dtype=np.int64)  # token i is row i, each sampled

    def decode_arrays(self) -> tuple[np.ndarray, ...]:
        """What the decode graphs stage (PackedBatch.decode_arrays): every token is stored."""
        return (self.ids, self.positions, self.write_slots, self.sample_idx, self.dec_ctx,
                tables_for(self.cache, self.dec_row, self.dec_ctx))

    def upload(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, BatchMeta]:
        """What PackedBatch.upload sends for the same rows, from one copy."""
        return send_batch(self.runner, self.cache, (self.ids, self.positions, self.sample_idx, self.write_slots),
                          None, self.dec_idx, self.dec_row, self.dec_ctx, ())
