"""Triton kernels over the paged KV pool: KV write and one-launch paged attention.

The pool of each layer is [num_blocks, block_size, kv_heads, head_dim]. One attention launch
serves a whole mixed batch: prefill chunks (with or without prior context) and decode rows are
all "sequences" of the packed batch, each described by where its queries start in the packed
batch, how many there are, how many keys it has after this step's write and its block table.
A query's absolute position is context_len - query_len + i, so it sees keys 0..that position
of its own sequence (minus those outside the sliding window). Packed tokens in no sequence
(static batching's padding) get a zero output.

Work split: program (tile, kv_head) takes BLOCK_Q query tokens of one sequence times the
GROUP query heads that share kv_head (GQA), so each K/V block is loaded once per group.
Sequence s owns tiles tile_start[s] .. tile_start[s] + cdiv(query_len[s], BLOCK_Q) - 1;
tile_start is an exclusive cumsum computed on the device, and tile_seq (which sequence each tile
belongs to) a search in it, so the grid (num_tokens // BLOCK_Q + num_seqs, kv_heads) depends only on
host-known sizes: no host sync, CUDA-graph friendly. Spare programs find no query rows and store nothing.

Triton compiles a kernel once per variant: its constexprs and what it specialises its other arguments
on (an integer equal to 1 or divisible by 16, a pointer's alignment). Nothing a step's size changes is
specialised on (do_not_specialize: the sequence count, the block table's width, the query's and new
K/V's token and head strides), so the only runtime choice of variant is the query tile, BLOCK_Q, from
the longest query in the batch: query_tile_lengths() lists them, and the engine's warm-up
(engine/model/warmup.py) compiles each before the engine serves.

Runs on CUDA, or on CPU tensors under the Triton interpreter (TRITON_INTERPRET=1 set before
triton is first imported). Two interpreter workarounds (triton 3.6 and 3.9, numpy 2.4), both
switched by constexprs so the GPU code keeps its fast form: the key loop is a `while` loop there
(a loaded scalar cannot be a `range` bound) but a `for` loop on the GPU (only `for` loops get
software-pipelined), and bf16 dots are done in fp32 there (the interpreter multiplies bf16 as
raw integer bits).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from . import kernel_variants

# Query rows (tokens x heads of a GQA group) per tile: small for decode-only batches, where a
# sequence has one token, larger when prefill chunks can fill them. tl.dot needs >= 16 rows.
_DECODE_ROWS = 16
_PREFILL_ROWS = 64
_MIN_ROWS = 16
_NO_WINDOW = 2**30  # a window wider than any context: one kernel variant for both cases


@triton.jit(do_not_specialize=["s_kt", "s_kh", "s_vt", "s_vh"])
def _write_kv_kernel(k_ptr, v_ptr, k_pool_ptr, v_pool_ptr, slot_ptr,
                     s_kt, s_kh, s_kd, s_vt, s_vh, s_vd,
                     s_pb, s_ps, s_ph, s_pd,
                     KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                     HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Program t: copy token t's K and V rows (all KV heads) into its pool slot."""
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    h = tl.arange(0, HEADS_PAD)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    # slot < 0: padding, stored nowhere. (A block & scalar mask breaks triton 3.9's interpreter.)
    mask = (h < KV_HEADS) & (d < tl.where(slot >= 0, HEAD_DIM, 0))
    safe = tl.maximum(slot, 0)
    dst = (safe // BLOCK_SIZE) * s_pb + (safe % BLOCK_SIZE) * s_ps + h * s_ph + d * s_pd
    k = tl.load(k_ptr + t * s_kt + h * s_kh + d * s_kd, mask=mask)
    v = tl.load(v_ptr + t * s_vt + h * s_vh + d * s_vd, mask=mask)
    tl.store(k_pool_ptr + dst, k, mask=mask)
    tl.store(v_pool_ptr + dst, v, mask=mask)


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """acc + a @ b. UPCAST: the interpreter multiplies bf16 as raw integer bits; fp32
    products of bf16 values are exact, so an fp32 dot gives the tensor-core result."""
    if UPCAST:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        out = tl.dot(a, b, acc, input_precision=PRECISION)
    return out


@triton.jit
def _attend_keys(j0, hi, q, pos, window, scale_log2, m, denom, acc,
                 table_row, k_head, v_head, s_kb, s_ks, s_kd, s_vb, s_vs, s_vd,
                 d, d_ok, BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                 UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Online-softmax update of the tile's rows with keys j0 .. j0 + BLOCK_N - 1 (those < hi)."""
    j = j0 + tl.arange(0, BLOCK_N)
    j_ok = j < hi
    # Any block size: each key finds its own physical block.
    blk = tl.load(table_row + j // BLOCK_SIZE, mask=j_ok, other=0).to(tl.int64)
    off = j % BLOCK_SIZE
    kv_mask = j_ok[:, None] & d_ok[None, :]
    k = tl.load(k_head + (blk * s_kb + off * s_ks)[:, None] + d[None, :] * s_kd, mask=kv_mask, other=0.0)
    v = tl.load(v_head + (blk * s_vb + off * s_vs)[:, None] + d[None, :] * s_vd, mask=kv_mask, other=0.0)
    qk = _mma(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], tl.float32), UPCAST, PRECISION) * scale_log2
    visible = j_ok[None, :] & (j[None, :] <= pos[:, None]) & (j[None, :] > pos[:, None] - window)
    qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m, tl.max(qk, axis=1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(qk - m_new[:, None])
    denom = denom * alpha + tl.sum(p, axis=1)
    acc = _mma(p.to(v.dtype), v, acc * alpha[:, None], UPCAST, PRECISION)
    return m_new, denom, acc


@triton.jit(do_not_specialize=["s_qt", "s_qh", "s_ot", "s_oh", "s_tab"])
def _paged_attn_kernel(
        q_ptr, k_pool_ptr, v_pool_ptr, o_ptr,
        q_start_ptr, q_len_ptr, ctx_ptr, table_ptr, tile_start_ptr, tile_seq_ptr,
        scale_log2, window,
        s_qt, s_qh, s_qd,
        s_kb, s_ks, s_kh, s_kd,
        s_vb, s_vs, s_vh, s_vd,
        s_ot, s_oh, s_od,
        s_tab,
        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_Q: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
        RANGE_LOOP: tl.constexpr):
    ROWS: tl.constexpr = BLOCK_Q * GROUP_PAD
    pid = tl.program_id(0)
    kvh = tl.program_id(1)
    s = tl.load(tile_seq_ptr + pid)
    tile = pid - tl.load(tile_start_ptr + s)
    q_start = tl.load(q_start_ptr + s)
    q_len = tl.load(q_len_ptr + s)
    ctx = tl.load(ctx_ptr + s)

    # Row r of the tile: query token tile*BLOCK_Q + r // GROUP_PAD, head kvh*GROUP + r % GROUP_PAD.
    r = tl.arange(0, ROWS)
    tok = tile * BLOCK_Q + r // GROUP_PAD
    g = r % GROUP_PAD
    row_ok = (tok < q_len) & (g < GROUP)
    pos = ctx - q_len + tok
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q_rows = (q_start + tok).to(tl.int64) * s_qt + (kvh * GROUP + g) * s_qh
    q = tl.load(q_ptr + q_rows[:, None] + d[None, :] * s_qd, mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    # Keys any row of the tile may see: [lo, hi). A spare tile gets an empty range.
    first = ctx - q_len + tile * BLOCK_Q
    lo = tl.maximum(first - window + 1, 0)
    hi = tl.where(tile * BLOCK_Q < q_len, tl.minimum(first + BLOCK_Q, ctx), lo)

    # Online softmax in base 2. m starts finite so fully masked rows give 0, not NaN.
    m = tl.full([ROWS], -1.0e30, tl.float32)
    denom = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, BLOCK_D], tl.float32)
    table_row = table_ptr + s.to(tl.int64) * s_tab
    k_head, v_head = k_pool_ptr + kvh * s_kh, v_pool_ptr + kvh * s_vh
    if RANGE_LOOP:  # a `for` loop is what the GPU compiler software-pipelines
        for j0 in range(lo, hi, BLOCK_N):
            m, denom, acc = _attend_keys(j0, hi, q, pos, window, scale_log2, m, denom, acc,
                                         table_row, k_head, v_head, s_kb, s_ks, s_kd, s_vb, s_vs, s_vd,
                                         d, d_ok, BLOCK_N, BLOCK_SIZE, UPCAST, PRECISION)
    else:  # the interpreter takes no loaded scalar as a `range` bound
        j0 = lo
        while j0 < hi:
            m, denom, acc = _attend_keys(j0, hi, q, pos, window, scale_log2, m, denom, acc,
                                         table_row, k_head, v_head, s_kb, s_ks, s_kd, s_vb, s_vs, s_vd,
                                         d, d_ok, BLOCK_N, BLOCK_SIZE, UPCAST, PRECISION)
            j0 += BLOCK_N

    out = acc / tl.where(denom > 0, denom, 1.0)[:, None]
    o_rows = (q_start + tok).to(tl.int64) * s_ot + (kvh * GROUP + g) * s_oh
    tl.store(o_ptr + o_rows[:, None] + d[None, :] * s_od, out.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])


@dataclass
class PagedAttnInputs:
    """The packed batch as the attention kernel reads it; built once per step, shared by layers.

    Sequences may come in any order; tokens covered by none get a zero output."""
    query_start: torch.Tensor   # [S] int32, first packed token of each sequence
    query_len: torch.Tensor     # [S] int32, >= 1
    context_len: torch.Tensor   # [S] int32, keys after this step's write
    block_tables: torch.Tensor  # [S, max_blocks] int32, padded with any valid block id
    slot_mapping: torch.Tensor  # [T] int64, pool slot of each packed token's K/V, -1: not stored
    max_query_len: int          # host-side: picks the tile shape
    _tiles: dict = field(default_factory=dict, repr=False)  # BLOCK_Q -> (tile_start, tile_seq)

    @property
    def num_seqs(self) -> int:
        return self.query_len.shape[0]

    def tiles(self, block_q: int, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(tile_start [S]: exclusive cumsum of each sequence's tile count, tile_seq [grid]: the sequence
        each tile belongs to, the last for spare tiles), device ops only, no sync; shared by the layers."""
        if block_q not in self._tiles:
            tiles = (self.query_len + block_q - 1) // block_q
            start = torch.cumsum(tiles, 0) - tiles
            pid = torch.arange(num_tokens // block_q + self.num_seqs, device=start.device, dtype=start.dtype)
            seq = torch.searchsorted(start, pid, right=True) - 1
            self._tiles[block_q] = (start.to(torch.int32), seq.to(torch.int32))
        return self._tiles[block_q]


def write_kv_triton(key: torch.Tensor, value: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                    slot_mapping: torch.Tensor) -> None:
    """Scatter key/value [T, Hkv, D] into the pools through slot_mapping [T]; slots < 0 are skipped."""
    T, kv_heads, head_dim = key.shape
    if T == 0:
        return
    assert k_pool.stride() == v_pool.stride()
    heads_pad, block_d = triton.next_power_of_2(kv_heads), triton.next_power_of_2(head_dim)
    _write_kv_kernel[(T,)](
        key, value, k_pool, v_pool, slot_mapping,
        *key.stride(), *value.stride(), *k_pool.stride(),
        KV_HEADS=kv_heads, HEADS_PAD=heads_pad, BLOCK_SIZE=k_pool.shape[1], HEAD_DIM=head_dim,
        BLOCK_D=block_d, num_warps=min(max(heads_pad * block_d // 256, 1), 4))  # ~8 elements a thread


def paged_attention_triton(query: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                           inputs: PagedAttnInputs, scale: float, sliding_window: int | None = None,
                           out: torch.Tensor | None = None, block_n: int | None = None,
                           num_warps: int | None = None) -> torch.Tensor:
    """query [T, H, D] (any strides) -> out [T, H, D] in one launch.

    The K/V of this step's tokens must already be in the pools (write_kv_triton).
    block_n (keys per inner step) and num_warps default by dtype and head size."""
    T, heads, head_dim = query.shape
    if out is None:
        out = query.new_zeros(T, heads, head_dim)
    else:
        out.zero_()  # padding tokens, which no program writes
    if inputs.num_seqs == 0 or T == 0:
        return out
    grid, args, consts = _attention_launch(query, k_pool, v_pool, out, inputs, scale, sliding_window, block_n)
    _paged_attn_kernel[grid](*args, **consts, num_warps=num_warps or _num_warps(query.dtype, head_dim))
    return out


def _attention_launch(query, k_pool, v_pool, out, inputs, scale, sliding_window, block_n):
    """(grid, positional args, constexpr kwargs) of one _paged_attn_kernel launch."""
    T, heads, head_dim = query.shape
    kv_heads = k_pool.shape[2]
    group = heads // kv_heads
    group_pad = triton.next_power_of_2(group)
    block_q = query_tile(heads, kv_heads, inputs.max_query_len)
    grid = (T // block_q + inputs.num_seqs, kv_heads)
    args = (query, k_pool, v_pool, out,
            inputs.query_start, inputs.query_len, inputs.context_len, inputs.block_tables,
            *inputs.tiles(block_q, T), scale * 1.4426950408889634, sliding_window or _NO_WINDOW,  # log2(e)
            *query.stride(), *k_pool.stride(), *v_pool.stride(), *out.stride(),
            inputs.block_tables.stride(0))
    fp32 = query.dtype == torch.float32
    consts = dict(
        GROUP=group, GROUP_PAD=group_pad, BLOCK_Q=block_q, BLOCK_N=block_n or (32 if fp32 else 64),
        BLOCK_SIZE=k_pool.shape[1], HEAD_DIM=head_dim, BLOCK_D=max(triton.next_power_of_2(head_dim), 16),
        UPCAST=_interpreting() and query.dtype == torch.bfloat16,
        PRECISION="ieee" if fp32 else "tf32", RANGE_LOOP=not _interpreting())
    return grid, args, consts


def _num_warps(dtype: torch.dtype, head_dim: int) -> int:
    """8 where 4 warps spill registers (sm_90, triton 3.6): fp32 (FMA dot) or head_dim > 128."""
    return 8 if dtype == torch.float32 or head_dim > 128 else 4


def query_tile(heads: int, kv_heads: int, max_query_len: int) -> int:
    """BLOCK_Q of a launch whose longest query has max_query_len tokens (the key of PagedAttnInputs.tiles)."""
    return _block_q(triton.next_power_of_2(heads // kv_heads), max_query_len)


def _block_q(group_pad: int, max_query_len: int) -> int:
    """Query tokens per tile: fill _DECODE_ROWS/_PREFILL_ROWS rows, no more tokens than a
    sequence has, and at least _MIN_ROWS rows."""
    rows = _DECODE_ROWS if max_query_len <= 1 else _PREFILL_ROWS
    block_q = min(max(rows // group_pad, 1), triton.next_power_of_2(max_query_len))
    return max(block_q, triton.cdiv(_MIN_ROWS, group_pad))


MAX_HEAD_DIM = 256  # beyond it a tile's accumulators spill (and no supported model goes there)


def cannot_run(heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> str | None:
    """Why these kernels cannot serve a model of this attention shape here, or None. Runs both kernels
    once on a two-block pool: a machine where Triton cannot compile (no working toolchain, an
    unsupported GPU) says so here, not in the middle of a request."""
    if head_dim > MAX_HEAD_DIM:
        return f"head size {head_dim} is beyond the Triton kernel's {MAX_HEAD_DIM}"
    try:
        pool = torch.zeros(2, 16, kv_heads, head_dim, dtype=dtype, device=device)
        kv = torch.ones(1, kv_heads, head_dim, dtype=dtype, device=device)
        one = torch.ones(1, dtype=torch.int32, device=device)
        inputs = PagedAttnInputs(one - 1, one, one, torch.zeros(1, 1, dtype=torch.int32, device=device),
                                 torch.zeros(1, dtype=torch.long, device=device), max_query_len=1)
        write_kv_triton(kv, kv, pool, pool, inputs.slot_mapping)
        out = paged_attention_triton(torch.ones(1, heads, head_dim, dtype=dtype, device=device), pool, pool, inputs,
                                     head_dim ** -0.5)
        if not bool((out == 1).all()):  # one key whose value is all ones
            return "the Triton kernel gave a wrong result on this GPU"
    except Exception as e:  # noqa: BLE001 - any failure to build or launch means: use the reference
        return f"Triton could not run its kernels here ({type(e).__name__}: {str(e)[:200]})"
    return None


def query_tile_lengths(heads: int, kv_heads: int, max_query_len: int) -> list[int]:
    """For each tile height (BLOCK_Q, a kernel variant) that batches whose longest query has at most
    max_query_len tokens launch with, the shortest such longest query: a batch of each compiles them all."""
    group_pad = triton.next_power_of_2(heads // kv_heads)
    firsts: dict[int, int] = {}
    q = 1
    while q <= max_query_len:  # _block_q changes only where next_power_of_2(q) does: at 1, 2, 3, 5, 9, ...
        firsts.setdefault(_block_q(group_pad, q), q)
        q = q + 1 if q < 2 else triton.next_power_of_2(q) + 1
    return sorted(firsts.values())


def _interpreting() -> bool:
    return type(_paged_attn_kernel).__name__ == "InterpretedFunction"


kernel_variants.track(_write_kv_kernel, _paged_attn_kernel)
