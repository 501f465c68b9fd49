"""The KV pool sizing rule the engine and the benchmark's peers share."""
from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.kv.pool import KVShape
from engine.kv.sizing import num_kv_blocks

SHAPE = KVShape(num_layers=2, kv_heads=2, head_dim=8)   # 2 x 2 x 2 x 8 x 4 bytes = 256 bytes per token
CPU = torch.device("cpu")


def _cfg(**kw):
    return EngineConfig(model="m", device="cpu", block_size=4, **kw)


def test_explicit_block_count_wins():
    assert num_kv_blocks(_cfg(num_kv_blocks=7, kv_cache_memory_gb=1.0), [SHAPE], torch.float32, CPU) == 7


def test_memory_budget_in_blocks():
    # 1 KiB blocks: 1 MiB holds 1024 of them; half the bytes per element, twice the blocks
    assert num_kv_blocks(_cfg(kv_cache_memory_gb=1 / 1024), [SHAPE], torch.float32, CPU) == 1024
    assert num_kv_blocks(_cfg(kv_cache_memory_gb=1 / 1024), [SHAPE], torch.bfloat16, CPU) == 2048


def test_cpu_default_is_one_gib():
    assert num_kv_blocks(_cfg(), [SHAPE], torch.float32, CPU) == (1 << 30) // 1024


def test_a_draft_models_pool_shares_the_budget():
    # speculative = "draft": the draft model's pool has as many blocks, so each block costs both
    draft = KVShape(num_layers=1, kv_heads=2, head_dim=8)   # 128 bytes per token
    assert num_kv_blocks(_cfg(kv_cache_memory_gb=1 / 1024), [SHAPE, draft], torch.float32, CPU) == 682
