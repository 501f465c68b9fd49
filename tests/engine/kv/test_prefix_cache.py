"""Prefix caching without a model: chained block hashes, sharing, eviction, and what the scheduler
computes when a prompt's prefix is already cached (token counts per step)."""
from __future__ import annotations

from engine.kv import KVCacheManager
from engine.kv.prefix_cache import extend_block_hashes
from engine.request import Request, SamplingParams
from scheduler_helpers import request, rows, scheduler, step


def _req(rid: int, tokens: list[int], max_tokens: int = 4) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=max_tokens, ignore_eos=True), 0.0)


def _compute(cache: KVCacheManager, req: Request, n: int) -> None:
    """As if a forward pass stored n more tokens of req."""
    req.num_computed_tokens += n
    cache.commit(req)


def test_block_hash_covers_the_whole_prefix_not_only_the_block():
    a = extend_block_hashes([], [1, 2, 3, 4, 5, 6, 7], block_size=2)
    b = extend_block_hashes([], [9, 9, 3, 4, 5, 6], block_size=2)
    assert len(a) == 3 and len(b) == 3  # full blocks only: token 7 is a partial block
    assert a[0] != b[0] and a[1] != b[1], "same tokens after a different prefix must hash differently"
    assert extend_block_hashes(a[:1], [1, 2, 3, 4, 5, 6, 7], 2) == a  # extending known hashes agrees


def test_a_second_request_shares_the_full_blocks_and_never_its_last_token():
    cache = KVCacheManager(num_blocks=8, block_size=4, prefix_caching=True)
    first = _req(0, range(10))
    assert cache.allocate(0, 10)
    _compute(cache, first, 10)
    same = _req(1, range(10))  # same 10 tokens: 2 full blocks cached, the partial third is not shared
    hit = cache.match(same)
    assert hit == cache.block_tables[0][:2]
    exact = _req(2, range(8))  # 8 tokens = 2 full blocks, but the last token must be computed
    assert cache.match(exact) == cache.block_tables[0][:1]
    assert cache.allocate(1, 10, hit)
    assert cache.block_tables[1][:2] == hit and cache.block_tables[1][2] != cache.block_tables[0][2]
    assert [cache.allocator.ref_count(b) for b in hit] == [2, 2]


def test_finished_blocks_stay_cached_until_the_pool_needs_them_least_recently_used_first():
    cache = KVCacheManager(num_blocks=4, block_size=2, prefix_caching=True)
    a = _req(0, range(5))
    assert cache.allocate(0, 5)
    _compute(cache, a, 5)
    blocks = list(cache.block_tables[0])
    cache.free(0)
    # two full blocks stay cached (the deepest first in line for eviction); the partial one is free
    assert cache.cached_blocks == [blocks[1], blocks[0]] and cache.num_free == 4
    again = _req(1, range(6))
    assert cache.match(again) == blocks[:2]
    # a request needing 3 blocks: 2 free + 1 evicted (the deeper cached block goes first)
    assert cache.allocate(2, 6)
    assert cache.cached_blocks == [blocks[0]] and cache.match(again) == blocks[:1]


def test_a_cached_block_taken_again_is_no_longer_evictable():
    cache = KVCacheManager(num_blocks=3, block_size=2, prefix_caching=True)
    a = _req(0, range(4))
    assert cache.allocate(0, 4)
    _compute(cache, a, 4)
    cache.free(0)
    b = _req(1, range(5))
    hit = cache.match(b)
    assert len(hit) == 2 and cache.allocate(1, 5, hit)
    assert cache.cached_blocks == [] and cache.num_free == 0
    assert not cache.allocate(2, 1)  # nothing left: shared blocks are never evicted


def test_without_prefix_caching_nothing_is_shared_or_kept():
    cache = KVCacheManager(num_blocks=4, block_size=2)
    a = _req(0, range(5))
    assert cache.allocate(0, 5)
    _compute(cache, a, 5)
    cache.free(0)
    assert cache.match(_req(1, range(5))) == [] and cache.cached_blocks == [] and cache.num_free == 4


# ---- the scheduler ---------------------------------------------------------------------------

def test_continuous_prefill_starts_after_the_cached_prefix():
    s = scheduler(enable_prefix_caching=True, max_num_batched_tokens=64)
    s.add(request(0, prompt_len=10, max_tokens=5))
    out = step(s)
    assert rows(out) == [(0, "prefill", 10, 0)] and (out.prefix_queries, out.prefix_hits) == (10, 0)
    s.add(request(1, prompt_len=13, max_tokens=3))  # its first 10 tokens are request 0's prompt
    out = step(s)
    # 2 full blocks (8 tokens) are cached; request 1 computes the other 5
    assert rows(out) == [(0, "decode", 1, 0), (1, "prefill", 5, 0)]
    assert out.rows[1].num_cached == 8 and (out.prefix_queries, out.prefix_hits) == (13, 8)
    req1 = s.running[1]
    assert req1.num_cached_tokens == 8 and req1.num_computed_tokens == 13
    assert s.cache.block_tables[1][:2] == s.cache.block_tables[0][:2]


def test_a_preempted_request_recomputes_only_what_the_cache_lacks():
    s = scheduler(enable_prefix_caching=True, num_blocks=5, block_size=2, max_num_batched_tokens=64)
    s.add(request(0, prompt_len=4, max_tokens=3))
    s.add(request(1, prompt_len=5, max_tokens=3))  # its first 2 blocks equal request 0's
    out = step(s)  # admitted together: no hit yet; request 1's copies of the 2 blocks stay private
    assert rows(out) == [(0, "prefill", 4, 0), (1, "prefill", 5, 0)] and out.prefix_hits == 0
    out = step(s)  # request 0 needs a 3rd block and none is free: request 1 is preempted
    assert out.preempted == [1] and rows(out) == [(0, "decode", 1, 0)]
    out = step(s)  # request 1 resumes on request 0's 2 cached blocks: 2 of its 6 tokens to compute
    assert rows(out) == [(0, "decode", 1, 0), (1, "prefill", 2, 0)]
    assert out.rows[1].num_cached == 4 and (out.prefix_queries, out.prefix_hits) == (6, 4)
    # the request's own count is of prompt tokens from its first admission (a resumed hit covers output)
    assert out.rows[1].request.num_cached_tokens == 0


def test_static_rows_prefill_only_what_the_cache_lacks_padded_to_the_longest():
    s = scheduler("static", static_batch_size=2, enable_prefix_caching=True)
    s.add(request(0, prompt_len=9, max_tokens=1))
    s.add(request(1, prompt_len=3, max_tokens=1))
    assert rows(step(s)) == [(0, "prefill", 9, 0), (1, "prefill", 3, 6)]
    s.add(request(2, prompt_len=10, max_tokens=1))  # 8 of its tokens are cached from request 0
    s.add(request(3, prompt_len=3, max_tokens=1))   # shares no full block
    out = step(s)
    assert rows(out) == [(2, "prefill", 2, 1), (3, "prefill", 3, 0)]
    assert [r.num_cached for r in out.rows] == [8, 0] and out.num_tokens == 6
