"""Helpers shared by engine tests: build engines on tiny models, check KV invariants."""
from __future__ import annotations

import random

from engine import EngineConfig, LLMEngine, SamplingParams


def make_engine(model_dir, **overrides) -> LLMEngine:
    kw = dict(model=str(model_dir), device="cpu", dtype="float32", block_size=4, num_kv_blocks=64,
              max_model_len=128, max_num_seqs=8, max_num_batched_tokens=32, static_batch_size=4)
    kw.update(overrides)
    return LLMEngine(EngineConfig(**kw))


def mixed_prompts(n: int, vocab: int = 200, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """n prompts of different lengths (1..40 tokens) and different max_tokens (1..20)."""
    rng = random.Random(seed)
    lengths = [1, 3, 7, 12, 19, 26, 33, 40]
    prompts = [[rng.randrange(3, vocab) for _ in range(lengths[i % len(lengths)])] for i in range(n)]
    max_tokens = [(i * 7) % 20 + 1 for i in range(n)]
    return prompts, max_tokens


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, **kw)


def check_kv_invariants(eng: LLMEngine) -> None:
    """free + used == total, no block in two tables, no used block on the free list, refs match."""
    cache = eng.cache
    alloc = cache.allocator
    owned = [b for t in cache.block_tables.values() for b in t]
    assert len(owned) == len(set(owned)), "a block appears in two block tables"
    assert alloc.num_free + len(owned) == cache.num_blocks, "free + used != total"
    assert all(alloc.ref_count(b) == 1 for b in owned), "a held block's reference count is not 1"
    free = set(alloc._free)
    assert len(free) == alloc.num_free and not (free & set(owned)), "a used block is on the free list"


def owner_of_blocks(eng: LLMEngine) -> dict[int, int]:
    """Physical block -> request id, read from the cache's block tables."""
    return {b: rid for rid, table in eng.cache.block_tables.items() for b in table}


def check_drained(eng: LLMEngine) -> None:
    assert not eng.has_unfinished(), "requests left in the engine"
    assert eng.cache.num_free == eng.cache.num_blocks, "KV blocks leaked"
    assert not eng.cache.block_tables
