"""How many KV blocks an engine gets: the one rule, used by the engine and by the benchmark's peers."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config import EngineConfig
from ..device_memory import GiB
from .pool import KVShape, kv_bytes_per_token, live_pool_bytes

CPU_BUDGET_BYTES = 1 * GiB   # default KV budget on CPU
GPU_FREE_SHARE = 0.6         # default KV budget on a GPU: this share of its free memory, split between its lanes


def kv_block_bytes(cfg: EngineConfig, shapes: Sequence[KVShape], dtype: torch.dtype) -> int:
    """One block's bytes in every pool that shares the block layout (the model's; a draft model's)."""
    return sum(kv_bytes_per_token(shape, dtype) for shape in shapes) * cfg.block_size


def kv_budget_bytes(cfg: EngineConfig, device: torch.device, lanes: int = 1) -> float:
    """The bytes an engine's KV pools may take: kv_cache_memory_gb; else 1 GiB on a CPU, and on a GPU its
    share of the device among `lanes` engines (gpu_share)."""
    if cfg.kv_cache_memory_gb is not None:
        return cfg.kv_cache_memory_gb * GiB
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # what PyTorch's allocator keeps cached is this process's to use (a pool another lane just let go)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return gpu_share(free, live_pool_bytes(device), lanes)
    return CPU_BUDGET_BYTES


def gpu_share(free: float, held: float, lanes: int) -> float:
    """One of `lanes` engines' KV budget on a GPU: an equal part of GPU_FREE_SHARE of the memory the KV
    pools may have there (what is free, and what the pools already held there take: those of the other
    lanes, built first), and never more than GPU_FREE_SHARE of what is free (an engine that is not a lane
    takes that, as before: `lanes` 1, no pool held)."""
    return min(GPU_FREE_SHARE * (free + held) / max(1, lanes), GPU_FREE_SHARE * free)


def num_kv_blocks(cfg: EngineConfig, shapes: Sequence[KVShape], dtype: torch.dtype, device: torch.device,
                  lanes: int = 1) -> int:
    """cfg.num_kv_blocks, else as many blocks as the memory budget holds in every pool of `shapes` (`lanes`:
    the engines that share the device's memory, kv_budget_bytes)."""
    if cfg.num_kv_blocks is not None:
        return cfg.num_kv_blocks
    return int(kv_budget_bytes(cfg, device, lanes) // kv_block_bytes(cfg, shapes, dtype))
