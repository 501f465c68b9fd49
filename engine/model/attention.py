"""Paged attention plugged into Hugging Face models through AttentionInterface.

The model runs on a packed ragged batch (batch dim 1). Each layer's attention
call writes the new K/V into the paged pool through the slot mapping, then
attends through block tables. This is the PyTorch reference backend (CPU and
any device); tokens fall into three groups, each done in as few calls as
possible:
- decode rows (one query each): one batched SDPA per group of rows of similar length, over K/V
  gathered by block table up to the group's longest row;
- prefill chunks: one SDPA each; a first chunk attends straight to its own keys;
- padding tokens (static batching's pad tokens) belong to no group: they go
  through every linear layer like real rows, but their attention output is zero.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import transformers

# attn_implementation names; they must not start with "paged|" (transformers strips that prefix)
ATTN_NAMES = {"torch": "inflight", "triton": "inflight_triton"}
META_KWARG = "inflight_meta"


@dataclass
class PrefillSeq:
    start: int            # first query token in the packed batch
    end: int              # one past the last query token
    context_len: int      # keys after this step's write (= start position + chunk length)
    blocks: torch.Tensor  # LongTensor of physical block ids covering context_len


@dataclass
class BatchMeta:
    """Per-iteration batch layout shared by every layer's attention call."""
    pool: object                      # KVPool
    num_tokens: int
    write_idx: torch.Tensor | None    # tokens whose K/V are stored (None: all of them)
    write_slots: torch.Tensor         # flat slot per stored token
    decode_idx: torch.Tensor          # [Bd] packed index of each decode row's token (longest row first)
    decode_blocks: torch.Tensor       # [Bd, max_blocks] block tables, padded with 0
    decode_ctx: torch.Tensor          # [Bd] keys each decode row attends to
    prefills: list[PrefillSeq]
    # (first row, end row, blocks) of decode rows of similar length: the reference backend gathers
    # each group's K/V only up to its own width (runner.decode_groups); None: one group of all rows
    decode_groups: list[tuple[int, int, int]] | None = None
    # the Triton backend's PagedAttnInputs, shared by every layer: built at the first layer from
    # device tensors only (None until then), or given (decode graphs' persistent inputs)
    kernel_inputs: object | None = None
    # [P, 3] device copy of each prefill's (start, query length, context length), for the Triton
    # backend (None: built from `prefills`)
    prefill_layout: torch.Tensor | None = None
    # the compiled forward's key of `pool` (triton_hf.pool_key), by which its attention operator finds it
    pool_key: int = -1
    # every token a decode row, in row order (decode_idx is 0..n-1: one row, or rows of equal length): the
    # reference backend then takes each group's queries as a slice and returns its outputs as they come
    rows_in_order: bool = False
    _masks: dict = field(default_factory=dict)  # cached per (group, sliding window)

    def groups(self) -> list[tuple[int, int, int]]:
        if self.decode_groups is None:
            return [(0, self.decode_idx.shape[0], self.decode_blocks.shape[1])]
        return self.decode_groups

    def decode_mask(self, group: tuple[int, int, int], window: int | None) -> torch.Tensor:
        key = ("decode", group, window)
        if key not in self._masks:
            a, b, width = group
            ctx = self.decode_ctx[a:b]
            j = torch.arange(width * self.pool.block_size, device=ctx.device)
            mask = j[None, :] < ctx[:, None]
            if window is not None:
                mask &= j[None, :] > (ctx[:, None] - 1 - window)
            self._masks[key] = mask[:, None, None, :]  # [rows, 1, 1, span]
        return self._masks[key]

    def prefill_mask(self, i: int, window: int | None) -> torch.Tensor:
        key = (i, window)
        if key not in self._masks:
            seq = self.prefills[i]
            q = seq.end - seq.start
            device = seq.blocks.device
            qpos = torch.arange(seq.context_len - q, seq.context_len, device=device)
            j = torch.arange(seq.context_len, device=device)
            mask = j[None, :] <= qpos[:, None]
            if window is not None:
                mask &= j[None, :] > (qpos[:, None] - window)
            self._masks[key] = mask
        return self._masks[key]


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                    sliding_window=None, **kwargs):
    """query [1, H, T, D], key/value [1, Hkv, T, D] -> (out [1, T, H, D], None)."""
    meta: BatchMeta = kwargs[META_KWARG]
    pool, layer = meta.pool, module.layer_idx
    k_new = key[0].transpose(0, 1)    # [T, Hkv, D]
    v_new = value[0].transpose(0, 1)
    _write_kv(meta, pool.k[layer], pool.v[layer], k_new, v_new)

    window = sliding_window if sliding_window else None
    if meta.rows_in_order:  # (no zeroed output to scatter into: a few operators less in every layer)
        outs = [_decode(meta, g, pool.k[layer], pool.v[layer], query, window, scaling) for g in meta.groups()]
        return (outs[0] if len(outs) == 1 else torch.cat(outs)).unsqueeze(0), None
    T, H, D = query.shape[2], query.shape[1], query.shape[3]
    out = query.new_zeros(T, H, D)
    for group in meta.groups() if meta.decode_idx.numel() else ():
        a, b, _ = group
        out[meta.decode_idx[a:b]] = _decode(meta, group, pool.k[layer], pool.v[layer], query, window, scaling)
    for i, seq in enumerate(meta.prefills):
        out[seq.start:seq.end] = _prefill(meta, i, seq, pool.k[layer], pool.v[layer], query, key, value,
                                          window, scaling)
    return out.unsqueeze(0), None


def _write_kv(meta: BatchMeta, k_pool, v_pool, k_new, v_new) -> None:
    if meta.write_slots.numel() == 0:
        return
    k_flat = k_pool.view(-1, *k_pool.shape[2:])
    v_flat = v_pool.view(-1, *v_pool.shape[2:])
    if meta.write_idx is not None:
        k_new, v_new = k_new[meta.write_idx], v_new[meta.write_idx]
    k_flat.index_copy_(0, meta.write_slots, k_new)
    v_flat.index_copy_(0, meta.write_slots, v_new)


def _gather(pool_t, blocks: torch.Tensor) -> torch.Tensor:
    """[..., nblocks] block ids -> [..., Hkv, nblocks*block_size, D].

    index_select on the flat block list copies about 1.5x faster than advanced indexing on CPU;
    this copy is the reference backend's main cost at long contexts (the Triton kernel reads the
    blocks in place)."""
    g = pool_t.index_select(0, blocks.reshape(-1)).view(*blocks.shape, *pool_t.shape[1:])
    g = g.flatten(-4, -3)  # [..., L, Hkv, D]
    return g.transpose(-3, -2)


def _decode(meta, group, k_pool, v_pool, query, window, scaling):
    a, b, width = group
    q = query[0][:, slice(a, b) if meta.rows_in_order else meta.decode_idx[a:b]].transpose(0, 1).unsqueeze(2)
    blocks = meta.decode_blocks[a:b, :width]
    k = _gather(k_pool, blocks)                                           # [rows, Hkv, L, D]
    v = _gather(v_pool, blocks)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=meta.decode_mask(group, window), scale=scaling,
                                       enable_gqa=q.shape[1] != k.shape[1])
    return o[:, :, 0]  # [rows, H, D]


def _prefill(meta, i, seq, k_pool, v_pool, query, key, value, window, scaling):
    q = query[:, :, seq.start:seq.end]  # [1, H, q, D]
    n = seq.end - seq.start
    gqa = query.shape[1] != key.shape[1]
    if seq.context_len == n and (window is None or window >= n):
        # First chunk: its own keys are the whole context; plain causal attention.
        o = F.scaled_dot_product_attention(q, key[:, :, seq.start:seq.end], value[:, :, seq.start:seq.end],
                                           is_causal=True, scale=scaling, enable_gqa=gqa)
    else:
        k = _gather(k_pool, seq.blocks)[:, :seq.context_len].unsqueeze(0)  # [1, Hkv, ctx, D]
        v = _gather(v_pool, seq.blocks)[:, :seq.context_len].unsqueeze(0)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=meta.prefill_mask(i, window), scale=scaling,
                                           enable_gqa=gqa)
    return o[0].transpose(0, 1)  # [q, H, D]


def register(backend: str = "torch") -> str:
    """Register a backend with transformers; returns its attn_implementation name."""
    if backend == "triton":
        from .triton_hf import paged_attention_hf as fn  # imports triton only when asked for
    else:
        fn = paged_attention
    name = ATTN_NAMES[backend]
    transformers.AttentionInterface.register(name, fn)
    return name
