"""Helpers shared by engine tests: build engines on tiny models, check KV invariants."""
from __future__ import annotations

import random
from collections import Counter

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.events import StepRows
from engine.kv_wire import KvFrames, fold_kv


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
    return SamplingParams(max_tokens=max_tokens, **{"temperature": 0.0, "ignore_eos": True, **kw})


def check_kv_invariants(eng: LLMEngine) -> None:
    """Every block is exactly one of free, held (reference count = the tables holding it) or cached and
    evictable (prefix caching: held by nobody, still indexed)."""
    cache = eng.cache
    alloc = cache.allocator
    holders = Counter(b for t in cache.block_tables.values() for b in t)
    for table in cache.block_tables.values():
        assert len(table) == len(set(table)), "a block appears twice in one table"
    assert all(alloc.ref_count(b) == n for b, n in holders.items()), "reference counts differ from the tables"
    free, cached = set(alloc._free), set(cache.cached_blocks)
    assert len(free) == alloc.num_free, "a block is on the free list twice"
    assert not (free & holders.keys()) and not (cached & holders.keys()), "a held block is free or evictable"
    assert not (free & cached), "a cached block is also on the free list"
    assert len(free) + len(cached) + len(holders) == cache.num_blocks, "free + cached + held != total"
    assert all(alloc.ref_count(b) == 0 for b in free | cached)
    if cache.prefix is None:
        assert all(n == 1 for n in holders.values()), "a block is shared without prefix caching"
    check_table_matrix(cache)
    check_host_pool(cache)


def check_wire_kv(eng: LLMEngine, ev) -> None:
    """A step event's KV and rows as the wire sends them (the changes since the engine's previous event,
    or the tables whole; the rows that go on from the previous step as runs; stamped as a lane stamps what
    it publishes) come back as exactly the tables and rows it holds. Call it on every event of the engine."""
    if ev is None:
        return
    eng.__dict__.setdefault("_kv_frames", KvFrames()).stamp(ev)
    wire, whole = ev.to_dict(), ev.to_dict(key=True)
    wire = eng.__dict__.setdefault("_step_rows", StepRows()).resolve(wire)
    assert wire["entries"] == whole["entries"], "the rows on the wire do not come back as the step's"
    folded = fold_kv(eng.__dict__.get("_folded_kv"), wire["kv"], wire["entries"])
    assert folded == whole["kv"], "the KV changes on the wire do not fold into the tables"
    eng.__dict__["_folded_kv"] = folded


def whole_kv(events: list[dict]) -> list[dict]:
    """Wire events with each step's KV folded whole (engine/kv_wire.py) and its rows whole (engine/events.py
    StepRows), per lane and half, as a client that read them in order holds them."""
    last, out, rows = {}, [], StepRows()
    for e in events:
        if e.get("type") == "step" and "kv" in e:
            e = rows.resolve(e)  # (its rows whole)
            pool = (e.get("lane"), e.get("part"))
            last[pool] = fold_kv(last.get(pool), e["kv"], e["entries"])
            e = {**e, "kv": last[pool]}
        out.append(e)
    return out


def check_table_matrix(cache) -> None:
    """The table matrix (what a step's decode rows gather) holds every table as it is, zeros after it,
    one row per request that holds blocks, and zeros in every other row."""
    m = cache.tables
    assert set(m.row) == {rid for rid, t in cache.block_tables.items() if t}, "matrix rows != tables"
    assert len(set(m.row.values())) == len(m.row), "two requests share a matrix row"
    for rid, r in m.row.items():
        table = cache.block_tables[rid]
        assert m.array[r, :len(table)].tolist() == table and not m.array[r, len(table):].any(), rid
    idle = [r for r in range(m.array.shape[0]) if r not in set(m.row.values())]
    assert not m.array[idle].any(), "a free matrix row is not zero"


def check_host_pool(cache) -> None:
    """Swap preemption: every host block is free or in exactly one swapped-out request's table, and a
    request's KV is on the device or on the host, never both."""
    if cache.host is None:
        assert not cache.host_tables
        return
    held = [b for t in cache.host_tables.values() for b in t]
    free = set(cache.host._free)
    assert len(held) == len(set(held)) and all(t for t in cache.host_tables.values()), "a host block held twice"
    assert len(free) == cache.host.num_free and not (free & set(held)), "a held host block is free"
    assert len(free) + len(held) == cache.host.num_blocks, "host free + held != total"
    assert not (cache.host_tables.keys() & cache.block_tables.keys()), "a request's KV on device and host"


def check_drained(eng: LLMEngine) -> None:
    assert not eng.has_unfinished(), "requests left in the engine"
    assert eng.cache.num_free == eng.cache.num_blocks, "KV blocks leaked"
    assert not eng.cache.block_tables and not eng.cache.host_tables
    assert eng.cache.host is None or eng.cache.host.num_free == eng.cache.host.num_blocks, "host blocks leaked"


def run_checked(eng: LLMEngine, prompts, params: list[SamplingParams], **per_request) -> tuple[list, list]:
    """Queue the prompts (per_request: lists of add_request keywords, one per prompt), step until all
    are done with the KV invariants checked every step, check nothing is left; (outputs, events)."""
    ids = [eng.add_request(p, sp, **{k: v[i] for k, v in per_request.items()})
           for i, (p, sp) in enumerate(zip(prompts, params))]
    eng.draining = True
    events = []
    while eng.has_unfinished():
        events.append(eng.step())
        check_kv_invariants(eng)
    check_drained(eng)
    return [eng.get_output(i) for i in ids], events
