"""Sampled tokens while they are still on the device: read back without stalling the launch of the next
step, and fed to that step before the host has read them (EngineConfig.overlap)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..request import PENDING_TOKEN
from .sampler import to_device


class SampledTokens:
    """A step's sampled token ids on their way to the host. On CUDA the copy goes to pinned memory without a
    wait; tolist() waits for it (for the step's forward, that is). rows: each token's ScheduledRow."""

    def __init__(self, tokens: torch.Tensor | Sequence[int], rows: Sequence):
        self.rows = rows
        self._ready = None
        if isinstance(tokens, torch.Tensor) and tokens.device.type == "cuda":
            self._host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
            self._host.copy_(tokens, non_blocking=True)
            self._ready = torch.cuda.Event()
            self._ready.record()
        else:
            self._host = tokens

    def tolist(self) -> list[int]:
        if self._ready is not None:
            self._ready.synchronize()
        return self._host if isinstance(self._host, list) else self._host.tolist()


class LastTokens:
    """Each table-matrix row's last sampled token (KVCacheManager.tables: one row per request holding
    blocks), on the device. A step launched before the step before it is read back has PENDING_TOKEN as
    its decode rows' input ids; fill() puts the values sampled there in, on the device, in stream order."""

    def __init__(self, device: torch.device):
        self.device = device
        self.table = torch.zeros(64, dtype=torch.long, device=device)

    def keep(self, matrix_rows: np.ndarray, tokens: torch.Tensor) -> None:
        """tokens[i] is the last token of matrix row matrix_rows[i] (a step's sampled tokens)."""
        if len(matrix_rows):
            self._hold(int(matrix_rows.max()))
            self.table.index_copy_(0, self._index(matrix_rows), tokens)

    def fill(self, ids: torch.Tensor, matrix_rows: torch.Tensor, top: int, every: bool) -> None:
        """ids[i] == PENDING_TOKEN becomes the last token of matrix row matrix_rows[i], in place. top: the
        largest of matrix_rows (the table must hold it even where the id is known and the value unused);
        every: every id is pending (the steady state: one gather into ids)."""
        self._hold(top)
        if every:
            torch.index_select(self.table, 0, matrix_rows, out=ids)
        else:
            ids.copy_(torch.where(ids == PENDING_TOKEN, self.table[matrix_rows], ids))

    def _hold(self, row: int) -> None:
        if row >= len(self.table):
            grown = torch.zeros(max(row + 1, 2 * len(self.table)), dtype=torch.long, device=self.device)
            grown[:len(self.table)] = self.table
            self.table = grown

    def _index(self, values: np.ndarray) -> torch.Tensor:
        return to_device(values, torch.long, self.device)


def pending_inputs(ids: np.ndarray, dec_idx, dec_row: np.ndarray) -> tuple[np.ndarray, int, bool] | None:
    """For input ids some of which are PENDING_TOKEN (overlap): each token's table-matrix row (a decode row's,
    dec_row at dec_idx; 0 for the others), the largest, and whether every id is pending (LastTokens.fill's
    arguments); None where none is. A pending id outside the decode rows (a prefill's, which only a bug could
    bring) raises."""
    pending = ids == PENDING_TOKEN
    if not pending.any():
        return None
    every = bool(pending.all())
    pending[dec_idx] = False
    if pending.any():
        raise RuntimeError("a token still pending on the device is an input of a row that is not a plain decode")
    rows = np.zeros(len(ids), dtype=np.int64)
    rows[dec_idx] = dec_row
    return rows, int(dec_row.max()), every
