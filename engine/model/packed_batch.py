"""PackedBatch: one iteration's tokens and attention layout, built row by row, sent in one copy."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..events import DECODE
from ..kv import KVCacheManager
from ..request import Request
from ..scheduler import ScheduledRow
from .attention import BatchMeta, PrefillSeq
from .device_tokens import pending_inputs

if TYPE_CHECKING:
    from .runner import ModelRunner


class PackedBatch:
    """Accumulates one iteration's tokens and attention layout, row by row. A decode row (one token)
    costs a few appends: the block tables of all decode rows are gathered at once from the cache's
    table matrix (engine/kv/table_matrix.py) when the batch is sent, not sliced and flattened per row."""

    def __init__(self, runner: ModelRunner, cache: KVCacheManager):
        self.runner, self.cache = runner, cache
        self.ids: list[int] = []
        self.positions: list[int] = []
        self.write_tok: list[int] = []  # tokens whose K/V are stored (ascending), and their slots
        self.write_slots: list[int] = []
        # decode rows: token index, table matrix row, keys attended to
        self.dec_idx: list[int] = []
        self.dec_row: list[int] = []
        self.dec_ctx: list[int] = []
        self.prefills: list[tuple[int, int, int, list[int]]] = []
        self.sample_idx: list[int] = []
        self.sample_rows: list[ScheduledRow] = []
        self.has_drafts = False  # a row brought draft tokens (they are verified when sampled)

    def add_rows(self, rows: list[ScheduledRow]) -> None:
        """Every row of a step, in order: each run of plain decode rows (one token, sampled, no padding or
        draft) at once, the others one by one."""
        run: list[ScheduledRow] = []
        for row in rows:
            if is_plain_decode(row):
                run.append(row)
                continue
            if run:
                self._decode_run(run)
                run = []
            self.add(row)
        if run:
            self._decode_run(run)

    def _decode_run(self, rows: list[ScheduledRow]) -> None:
        """Decode rows one after the other: each its last token at its next position, stored and sampled;
        the slots from the table matrix in one gather (what add gives them one at a time)."""
        t, n = len(self.ids), len(rows)
        pos, ids, matrix_rows, slots = (a.tolist() for a in decode_reads(self.cache, rows))
        self.ids.extend(ids)
        self.positions.extend(pos)
        self.write_tok.extend(range(t, t + n))
        self.write_slots.extend(slots)
        self.dec_idx.extend(range(t, t + n))
        self.dec_row.extend(matrix_rows)
        self.dec_ctx.extend([x + 1 for x in pos])
        self.sample_idx.extend(range(t, t + n))
        self.sample_rows.extend(rows)

    def add(self, row: ScheduledRow) -> None:
        req, pad = row.request, self.runner.pad_token_id
        if row.num_pad and row.num_new == 0:
            # A finished row that still holds its slot: one pad token attending to its cache.
            ctx = req.num_computed_tokens
            self._decode_row(len(self.ids), req, ctx)
            self.ids.append(pad)
            self.positions.append(min(ctx, self.runner.max_positions - 1))
        elif row.num_pad:
            # Left padding: computed through every layer, attends to nothing, stored nowhere.
            self.ids.extend([pad] * row.num_pad)
            self.positions.extend([0] * row.num_pad)
        if row.num_new:
            self._real_tokens(row, req)

    def _real_tokens(self, row: ScheduledRow, req: Request) -> None:
        start = req.num_computed_tokens
        ids = token_slice(req, start, start + row.num_new - len(row.draft))
        if row.draft:  # a draft row samples at its last token and after each draft token
            ids = ids + row.draft
            self.has_drafts = True
        self.add_tokens(req, ids, start, row.num_samples, row)

    def add_tokens(self, req: Request, ids: list[int], start: int, num_samples: int = 0,
                   sample_row: ScheduledRow | None = None) -> None:
        """Tokens `ids` of req at positions start.., their K/V written to its blocks; the logits of the
        last num_samples of them kept (sample_rows names `sample_row` for each)."""
        t, n = len(self.ids), len(ids)
        end = start + n
        self.ids.extend(ids)
        if n == 1:
            bs = self.cache.block_size
            self.positions.append(start)
            self.write_tok.append(t)
            self.write_slots.append(self.cache.block_tables[req.request_id][start // bs] * bs + start % bs)
            self._decode_row(t, req, end)
        else:
            self.positions.extend(range(start, end))
            self.write_tok.extend(range(t, t + n))
            self.write_slots.extend(self.cache.slots(req.request_id, start, end))
            blocks = self.cache.block_tables[req.request_id][:self.cache.blocks_for(end)]
            self.prefills.append((t, t + n, end, blocks))
        if num_samples:
            self.sample_idx.extend(range(t + n - num_samples, t + n))
            self.sample_rows.extend([sample_row] * num_samples)

    def _decode_row(self, t: int, req: Request, ctx: int) -> None:
        self.dec_idx.append(t)
        self.dec_row.append(self.cache.tables.row[req.request_id])
        self.dec_ctx.append(ctx)

    def decode_arrays(self) -> tuple[np.ndarray, ...]:
        """A decode-only batch (row i is token i) as the decode graphs stage it: ids, positions, each token's
        slot (-1: not stored), the logit rows kept, contexts, block tables (tables_for's layout)."""
        slots = np.full(len(self.ids), -1, dtype=np.int64)
        slots[self.write_tok] = self.write_slots
        ints = (np.array(v, dtype=np.int64) for v in (self.ids, self.positions, self.sample_idx, self.dec_ctx))
        ids, positions, keep, ctx = ints
        rows = np.array(self.dec_row, dtype=np.intp)
        return ids, positions, slots, keep, ctx, tables_for(self.cache, rows, ctx), rows

    def sample_matrix_rows(self) -> np.ndarray:
        """The table-matrix row of each sampled token's request."""
        row = self.cache.tables.row
        return np.array([row[r.request.request_id] for r in self.sample_rows], dtype=np.intp)

    def upload(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, BatchMeta]:
        """(input ids [1, T], positions [1, T], sampling rows, BatchMeta) on the device, from one copy."""
        written = None if len(self.write_tok) == len(self.ids) else self.write_tok  # None: every token
        return send_batch(self.runner, self.cache, (self.ids, self.positions, self.sample_idx, self.write_slots),
                          written, np.array(self.dec_idx, dtype=np.int64), np.array(self.dec_row, dtype=np.intp),
                          np.array(self.dec_ctx, dtype=np.int64), self.prefills)


def is_plain_decode(row: ScheduledRow) -> bool:
    """One decode token, sampled: no prefill chunk, padding or draft (a draft makes num_new more than 1)."""
    return row.num_new == 1 and row.phase == DECODE and not row.num_pad


def decode_reads(cache: KVCacheManager, rows: list[ScheduledRow]) -> tuple[np.ndarray, ...]:
    """Plain decode rows' inputs: each row's last token at its next position, stored in the slot its table
    gives that position. (positions, token ids, table matrix rows, slots), three reads a row and one gather."""
    reqs = [r.request for r in rows]
    pos, ids = next_tokens(reqs)
    matrix_rows = table_rows(cache, reqs)
    return pos, ids, matrix_rows, slots_at(cache, matrix_rows, pos)


def next_tokens(reqs: list[Request]) -> tuple[np.ndarray, np.ndarray]:
    """Each decoding request's next position and the token it is fed there (its last)."""
    return (np.array([q.num_computed_tokens for q in reqs], dtype=np.int64),
            np.array([q.output_token_ids[-1] for q in reqs], dtype=np.int64))


def table_rows(cache: KVCacheManager, reqs: list[Request]) -> np.ndarray:
    """Each request's row of the cache's table matrix."""
    return np.array([cache.tables.row[q.request_id] for q in reqs], dtype=np.intp)


def slots_at(cache: KVCacheManager, matrix_rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The KV slot of each position `pos` in the table of matrix row `matrix_rows`: one gather."""
    bs = cache.block_size
    return cache.tables.array[matrix_rows, pos // bs].astype(np.int64) * bs + pos % bs


def tables_for(cache: KVCacheManager, rows: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """The block tables [rows, blocks of the longest] int32 of matrix rows `rows` with contexts `ctx`, each
    padded with 0 after the blocks its context needs: one gather from the cache's table matrix."""
    bs = cache.block_size
    width = -(-int(ctx.max(initial=0)) // bs)
    tables = cache.tables.array[rows, :width]
    if len(ctx) and ctx.min() <= (width - 1) * bs:  # a row needs fewer blocks than the longest
        tables[np.arange(width) >= -(-ctx // bs)[:, None]] = 0
    return tables


def send_batch(runner: ModelRunner, cache: KVCacheManager, tokens: tuple, written, dec_idx: np.ndarray,
               dec_row: np.ndarray, dec_ctx: np.ndarray, prefills) -> tuple[torch.Tensor, torch.Tensor,
                                                                           torch.Tensor, BatchMeta]:
    """A batch on the device from one copy: `tokens` (ids, positions, logit rows kept, slots of the stored
    tokens; lists or arrays), `written` (the stored tokens, None: all), the decode rows (token index, table
    matrix row, context) and the prefills ((start, end, context, blocks) each). Decode rows go longest first
    (a stable order), so rows of similar length are neighbours (see decode_groups). Decode rows' ids that are
    PENDING_TOKEN are filled on the device from the runner's last tokens (EngineConfig.overlap)."""
    tokens = (np.asarray(tokens[0], dtype=np.int64), *tokens[1:])
    fill = pending_inputs(tokens[0], dec_idx, dec_row)
    order = np.argsort(-dec_ctx, kind="stable")
    dec_ctx = dec_ctx[order]
    tables = tables_for(cache, dec_row[order], dec_ctx)
    up = HostInts()
    ids, pos, keep, slots = (up.add(v) for v in tokens)
    written = None if written is None else up.add(written)
    dec_idx_sorted = dec_idx[order]
    dec_idx, dec_ctx_part = up.add(dec_idx_sorted), up.add(dec_ctx)
    layout = up.add([x for s, e, c, _ in prefills for x in (s, e - s, c)])
    blocks = [up.add(b) for *_, b in prefills]
    dec_blocks = up.add(tables)
    token_rows = up.add(fill[0]) if fill else None
    dev = up.send(runner.device)
    if fill:
        runner.last_tokens.fill(dev[ids], dev[token_rows], *fill[1:])
    meta = BatchMeta(
        pool=runner.pool, num_tokens=int(dev[pos].shape[0]),
        write_idx=None if written is None else dev[written], write_slots=dev[slots],
        decode_idx=dev[dec_idx], decode_blocks=dev[dec_blocks].view(*tables.shape),
        decode_ctx=dev[dec_ctx_part], decode_groups=decode_groups(-(-dec_ctx // cache.block_size)),
        prefills=[PrefillSeq(s, e, c, dev[b]) for (s, e, c, _), b in zip(prefills, blocks)],
        prefill_layout=dev[layout].view(len(prefills), 3), rows_in_order=rows_in_order(dec_idx_sorted, tokens[0]))
    return dev[ids].view(1, -1), dev[pos].view(1, -1), dev[keep], meta


def rows_in_order(dec_idx: np.ndarray, ids) -> bool:
    """Whether every token is a decode row, longest first in token order (BatchMeta.rows_in_order)."""
    return 0 < len(ids) == len(dec_idx) and bool((dec_idx == np.arange(len(ids))).all())


class HostInts:
    """Integers bound for the device (lists, or arrays such as a gathered table), each part back as a flat
    int64 tensor there. On CUDA they travel as one tensor: one transfer a step, pinned and non-blocking (no
    host sync), each part a view of it; on the CPU each part is wrapped as it is (nothing to transfer)."""

    def __init__(self):
        self._parts: list = []

    def add(self, values) -> int:
        self._parts.append(values)
        return len(self._parts) - 1

    def send(self, device: torch.device) -> list[torch.Tensor]:
        parts = [np.asarray(v, dtype=np.int64).reshape(-1) for v in self._parts]
        if device.type != "cuda":
            return [torch.from_numpy(p) for p in parts]
        return one_copy(parts, lambda host: host.pin_memory().to(device, non_blocking=True))


def one_copy(parts: list[np.ndarray], move) -> list[torch.Tensor]:
    """Flat int64 arrays moved as one tensor (`move`: the host tensor -> its copy), each back as a view of it."""
    if not parts:
        return []
    moved = move(torch.from_numpy(np.concatenate(parts)))
    ends = np.cumsum([len(p) for p in parts]).tolist()
    return [moved[e - len(p):e] for p, e in zip(parts, ends)]


def decode_groups(widths) -> list[tuple[int, int, int]]:
    """(first row, end row, width in blocks) of runs of decode rows, given each row's block count in
    descending order: a row starts a new run when it needs at most half its run's width, so the K/V
    gathered for a row is never more than twice its own (padding every row to the longest, one row of
    1,024 tokens among fifteen of 16 copies 13x the K/V the rows hold). A binary search a run, not a
    look at every row."""
    widths = np.asarray(widths, dtype=np.int64)
    if len(widths) and 2 * widths[-1] > widths[0]:  # one run (most steps): no search
        return [(0, len(widths), int(widths[0]))]
    after = -widths  # ascending
    groups, start = [], 0
    while start < len(widths):
        top = int(widths[start])
        end = max(start + 1, int(np.searchsorted(after, -(top // 2), side="left")))  # first with 2w <= top
        groups.append((start, end, top))
        start = end
    return groups


def token_slice(req: Request, start: int, end: int) -> list[int]:
    """Tokens [start, end) of prompt + output without concatenating the whole sequence."""
    p = req.prompt_token_ids
    if end <= len(p):
        return p[start:end]
    o, lp = req.output_token_ids, len(p)
    if start >= lp:
        return o[start - lp:end - lp]
    return p[start:] + o[:end - lp]
