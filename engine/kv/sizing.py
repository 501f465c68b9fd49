"""How many KV blocks an engine gets: the one rule, used by the engine and by the benchmark's peers."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config import EngineConfig
from ..device_memory import GiB
from .pool import KVShape, kv_bytes_per_token

CPU_BUDGET_BYTES = 1 * GiB   # default KV budget on CPU
GPU_FREE_SHARE = 0.6         # default KV budget on a GPU: this share of its free memory


def kv_block_bytes(cfg: EngineConfig, shapes: Sequence[KVShape], dtype: torch.dtype) -> int:
    """One block's bytes in every pool that shares the block layout (the model's; a draft model's)."""
    return sum(kv_bytes_per_token(shape, dtype) for shape in shapes) * cfg.block_size


def kv_budget_bytes(cfg: EngineConfig, device: torch.device) -> float:
    if cfg.kv_cache_memory_gb is not None:
        return cfg.kv_cache_memory_gb * GiB
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return GPU_FREE_SHARE * free
    return CPU_BUDGET_BYTES


def num_kv_blocks(cfg: EngineConfig, shapes: Sequence[KVShape], dtype: torch.dtype, device: torch.device) -> int:
    """cfg.num_kv_blocks, else as many blocks as the memory budget holds in every pool of `shapes`."""
    if cfg.num_kv_blocks is not None:
        return cfg.num_kv_blocks
    return int(kv_budget_bytes(cfg, device) // kv_block_bytes(cfg, shapes, dtype))
