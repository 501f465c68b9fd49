"""The Triton kernels as Hugging Face's attention function, eagerly and inside torch.compile.

Eagerly, `paged_attention_hf` launches the kernels itself. Traced by torch.compile (the decode graphs'
compiled forward, engine/model/decode_graphs.py), each layer's write and attention go through one
custom operator instead, `inflight::write_kv_and_attend`, which the compiler keeps whole. The operator
finds the KV pool by a key, not as an argument: the pools stay out of the compiler's guards and inputs
(two tensors a layer), as an attention layer's cache does in vLLM. It is declared as mutating nothing,
which holds because of how it is used: its output feeds the next layer (never dropped, never merged:
each call names its own layer), nothing else in the graph reads or writes a pool (nothing to reorder
it against), and the graph only ever runs inference.
"""
from __future__ import annotations

import itertools
import weakref

import torch

from .attention import META_KWARG
from .triton_attention import PagedAttnInputs, paged_attention_triton, query_tile, write_kv_triton

_POOLS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> KVPool, for the operator
_KEYS = itertools.count()


def pool_key(pool) -> int:
    """A new key the compiled operator finds `pool` by (while the pool lives)."""
    key = next(_KEYS)
    _POOLS[key] = pool
    return key


def build_inputs(meta) -> PagedAttnInputs:
    """PagedAttnInputs from the engine's BatchMeta: decode rows first, then prefill chunks.

    Only device ops and host ints BatchMeta already has: no host sync (where the runner sent
    meta.prefill_layout along with the rest of the step's indices)."""
    dev = meta.write_slots.device
    i32 = torch.int32
    lens = [p.end - p.start for p in meta.prefills]
    layout = meta.prefill_layout
    if layout is None:
        layout = torch.tensor([[p.start, p.end - p.start, p.context_len] for p in meta.prefills],
                              dtype=torch.long, device=dev).view(len(meta.prefills), 3)
    layout = layout.to(i32)
    n_dec = meta.decode_idx.shape[0]
    query_start = torch.cat([meta.decode_idx.to(i32), layout[:, 0]])
    query_len = torch.cat([torch.ones(n_dec, dtype=i32, device=dev), layout[:, 1]])
    context_len = torch.cat([meta.decode_ctx.to(i32), layout[:, 2]])
    width = max([meta.decode_blocks.shape[1]] + [p.blocks.shape[0] for p in meta.prefills])
    tables = torch.zeros(n_dec + len(meta.prefills), width, dtype=i32, device=dev)
    tables[:n_dec, :meta.decode_blocks.shape[1]] = meta.decode_blocks
    for i, p in enumerate(meta.prefills):
        tables[n_dec + i, :p.blocks.shape[0]] = p.blocks
    slots = torch.full((meta.num_tokens,), -1, dtype=torch.long, device=dev)
    if meta.write_idx is None:
        slots[:meta.write_slots.shape[0]] = meta.write_slots
    else:
        slots[meta.write_idx] = meta.write_slots
    return PagedAttnInputs(query_start, query_len, context_len, tables, slots,
                           max_query_len=max(lens, default=1 if n_dec else 0))


def paged_attention_hf(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                       sliding_window=None, **kwargs):
    """Drop-in for attention.paged_attention (same AttentionInterface signature) on the kernels.

    query [1, H, T, D], key/value [1, Hkv, T, D] -> (out [1, T, H, D], None)."""
    meta = kwargs[META_KWARG]
    inputs = meta.kernel_inputs  # one per step, shared by every layer
    if inputs is None:
        inputs = meta.kernel_inputs = build_inputs(meta)
    layer = module.layer_idx
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    q, k, v = query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1)
    # is_dynamo_compiling: true only inside the trace (is_compiling is true in every thread while any
    # thread compiles: another lane's eager step would take this branch)
    if torch.compiler.is_dynamo_compiling() and meta.pool_key >= 0:
        tiles = inputs.tiles(query_tile(q.shape[1], k.shape[1], inputs.max_query_len), q.shape[0])
        out = torch.ops.inflight.write_kv_and_attend(
            q, k, v, meta.pool_key, layer, inputs.query_start, inputs.query_len, inputs.context_len,
            inputs.block_tables, inputs.slot_mapping, *tiles, scale, sliding_window or 0, inputs.max_query_len)
    else:
        out = _write_and_attend(q, k, v, meta.pool.k[layer], meta.pool.v[layer], inputs, scale, sliding_window)
    return out.unsqueeze(0), None


def _write_and_attend(q, k, v, k_pool, v_pool, inputs: PagedAttnInputs, scale: float, window) -> torch.Tensor:
    """The step's K/V written to the layer's pools, then its attention over them: out [T, H, D]."""
    write_kv_triton(k, v, k_pool, v_pool, inputs.slot_mapping)
    return paged_attention_triton(q, k_pool, v_pool, inputs, scale, sliding_window=window or None)


@torch.library.custom_op("inflight::write_kv_and_attend", mutates_args=())
def _write_kv_and_attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, pool_key: int, layer: int,
                         query_start: torch.Tensor, query_len: torch.Tensor, context_len: torch.Tensor,
                         block_tables: torch.Tensor, slot_mapping: torch.Tensor, tile_start: torch.Tensor,
                         tile_seq: torch.Tensor, scale: float, window: int, max_query_len: int) -> torch.Tensor:
    """_write_and_attend on layer `layer` of the pool registered as `pool_key`, its tiles given."""
    pool = _POOLS.get(pool_key)
    if pool is None:
        raise RuntimeError(f"no KV pool is registered as {pool_key} (a compiled forward outlived its engine?)")
    inputs = PagedAttnInputs(query_start, query_len, context_len, block_tables, slot_mapping, max_query_len)
    inputs._tiles[query_tile(query.shape[1], key.shape[1], max_query_len)] = (tile_start, tile_seq)
    return _write_and_attend(query, key, value, pool.k[layer], pool.v[layer], inputs, scale, window)


@_write_kv_and_attend.register_fake
def _(query, key, value, pool_key, layer, query_start, query_len, context_len, block_tables, slot_mapping,
      tile_start, tile_seq, scale, window, max_query_len):
    return query.new_empty(query.shape)
