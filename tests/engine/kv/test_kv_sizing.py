"""The KV pool sizing rule the engine and the benchmark's peers share."""
from __future__ import annotations

import gc

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import EngineConfig
from engine.kv.pool import KVPool, KVShape, live_pool_bytes
from engine.kv.sizing import GPU_FREE_SHARE, gpu_share, num_kv_blocks

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


@settings(max_examples=200, deadline=None)
@given(free=st.integers(1 << 30, 1 << 38), lanes=st.integers(1, 6), rebuilds=st.lists(st.integers(0, 5), max_size=8))
def test_lanes_on_one_gpu_take_equal_parts_however_they_are_built_again(free, lanes, rebuilds):
    """Lanes built one after another on a GPU (each seeing what the ones before left free) each get
    GPU_FREE_SHARE / lanes of what the pools may have; a lane built again after giving its pool back gets
    the same; together they never take more than GPU_FREE_SHARE of it."""
    pools: dict[int, float] = {}

    def build(lane: int) -> None:
        pools.pop(lane, None)  # (a reconfigure gives the old pool back first)
        held = sum(pools.values())
        pools[lane] = gpu_share(free - held, held, lanes)
    for lane in [*range(lanes), *(r % lanes for r in rebuilds)]:
        build(lane)
    assert max(pools.values()) - min(pools.values()) < 1e-6 * free
    assert sum(pools.values()) <= GPU_FREE_SHARE * free * (1 + 1e-9)
    assert abs(pools[0] - GPU_FREE_SHARE * free / lanes) < 1e-6 * free


def test_an_engine_alone_takes_its_share_of_what_is_free_as_before():
    assert gpu_share(10e9, 0, 1) == GPU_FREE_SHARE * 10e9
    # more lanes than there is room for (a lane's pool held elsewhere): never more than what is free allows
    assert gpu_share(1e9, 9e9, 1) == GPU_FREE_SHARE * 1e9


def test_live_pool_bytes_counts_the_pools_held_until_they_are_dropped():
    gc.collect()  # (other tests' dropped pools, collected below otherwise)
    before = live_pool_bytes(CPU)
    pool = KVPool(SHAPE, 16, 4, torch.float32, CPU)
    assert live_pool_bytes(CPU) - before == pool.nbytes == 16 * 4 * 256
    del pool
    gc.collect()
    assert live_pool_bytes(CPU) == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a GPU's free memory is what is shared")
def test_two_lanes_on_a_gpu_get_the_same_pool_and_keep_it_across_a_reconfigure(tiny_model_dirs):
    """The service's lanes on one GPU, sized by default: equal pools whichever loaded first, the same after a
    settings change rebuilds them (docs/perf/run_gpu.sh check runs this)."""
    from service_helpers import make_service, wait_settled
    svc = make_service(tiny_model_dirs["llama"], device="cuda", dtype="bfloat16", num_kv_blocks=None,
                       block_size=128, cuda_graphs=False, warmup=False)  # (32 KiB blocks: about a million a lane)
    try:
        before = [w.engine.cache.num_blocks for w in svc.workers.values()]
        svc.configure(max_num_seqs=4)
        wait_settled(svc)
        after = [w.engine.cache.num_blocks for w in svc.workers.values()]
        assert max(before) - min(before) <= 0.01 * max(before), before
        assert max(after) - min(after) <= 0.01 * max(after) and abs(after[0] - before[0]) <= 0.02 * before[0], \
            (before, after)
    finally:
        svc.stop()
