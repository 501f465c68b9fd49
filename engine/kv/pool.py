"""Per-layer paged KV pools: [num_blocks, block_size, kv_heads, head_dim] for K and for V."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import torch

from ..device_memory import check_kv_fits, device_name


@dataclass(frozen=True)
class KVShape:
    num_layers: int
    kv_heads: int
    head_dim: int


def kv_shape(hf_config) -> KVShape:
    """Layer count, KV heads and head size from a Hugging Face config (GQA and explicit head_dim aware)."""
    heads = hf_config.num_attention_heads
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
    return KVShape(hf_config.num_hidden_layers, kv_heads, head_dim)


def blocks_for(num_tokens: int, block_size: int) -> int:
    """How many blocks hold num_tokens tokens (the last one partly filled)."""
    return -(-num_tokens // block_size)


def kv_bytes_per_token(shape: KVShape, dtype: torch.dtype) -> int:
    return 2 * shape.num_layers * shape.kv_heads * shape.head_dim * dtype.itemsize


class KVPool:
    """The physical KV memory. Zero-initialised: a NaN in an unwritten slot would
    poison attention even where it is masked out (0 x NaN)."""

    def __init__(self, shape: KVShape, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device):
        self.shape, self.num_blocks, self.block_size = shape, num_blocks, block_size
        dims = (num_blocks, block_size, shape.kv_heads, shape.head_dim)
        check_kv_fits(kv_bytes_per_token(shape, dtype) * num_blocks * block_size, torch.device(device))
        self.k = [torch.zeros(dims, dtype=dtype, device=device) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(dims, dtype=dtype, device=device) for _ in range(shape.num_layers)]
        with _LIVE_LOCK:
            _LIVE.add(self)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


_LIVE: weakref.WeakSet[KVPool] = weakref.WeakSet()  # every pool this process holds, until it is dropped
_LIVE_LOCK = threading.Lock()  # (pools are made in several threads: a set must not change while it is listed)


def live_pool_bytes(device: torch.device) -> int:
    """Bytes of the KV pools this process holds on `device` (every engine's, a lane's or not)."""
    name = device_name(device)
    with _LIVE_LOCK:
        pools = list(_LIVE)
    return sum(p.nbytes for p in pools if p.k and device_name(p.k[0].device) == name)
