"""No KV block and no request is ever lost, whatever the sequence of add / abort / step, for every
strategy and scheduling policy, with random priorities and tenants."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import SCHEDULING_POLICIES, STRATEGIES
from engine.kv import BlockAllocator, KVCacheManager, OutOfBlocks
from engine_helpers import check_drained, check_kv_invariants, check_wire_kv, greedy, make_engine
from tiers import examples

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 30), st.integers(1, 12), st.integers(-2, 2),
                  st.sampled_from([None, "a", "b"])),
        st.tuples(st.just("abort"), st.integers(0, 40)),
        st.tuples(st.just("step"), st.integers(1, 3)),
    ),
    min_size=1, max_size=25,
)


class Lazy(dict):
    """Built on first use: key -> make(*key)."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, key):
        self[key] = value = self.make(*key)
        return value


@pytest.fixture(scope="module")
def engines(tiny_model_dirs):
    # Small pool and budget so preemption, chunking and static reservations all happen.
    # The prompts below share prefixes, so with prefix caching blocks are shared, cached and evicted.
    return Lazy(lambda s, p, c: make_engine(
        tiny_model_dirs["llama"], strategy=s, scheduling_policy=p, num_kv_blocks=12, max_model_len=48,
        max_num_batched_tokens=12, max_num_seqs=4, static_batch_size=3, enable_prefix_caching=c))


@pytest.mark.parametrize("policy", SCHEDULING_POLICIES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=ops)
def test_random_add_abort_step(engines, strategy, policy, seq):
    _random_run(engines[strategy, policy, False], seq)


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=ops)
def test_random_add_abort_step_with_prefix_caching(engines, strategy, policy, seq):
    _random_run(engines[strategy, policy, True], seq)


@pytest.fixture(scope="module")
def swapping(tiny_model_dirs):
    """Swap preemption, a host pool of 3 blocks (2,048 bytes each): some preemptions swap, some fall back."""
    return {(p, c): make_engine(tiny_model_dirs["llama"], scheduling_policy=p, num_kv_blocks=12, max_model_len=48,
                                max_num_batched_tokens=12, max_num_seqs=4, enable_prefix_caching=c,
                                preemption_mode="swap", swap_space_gb=3 * 2048 / 2 ** 30)
            for p in ("fcfs", "priority") for c in (False, True)}


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=ops)
def test_random_add_abort_step_with_swap(swapping, policy, caching, seq):
    """Swap preemption: device and host blocks all accounted for (check_kv_invariants checks the host
    pool), swapped-out requests aborted, swapped back and finished."""
    _random_run(swapping[policy, caching], seq)


@pytest.fixture(scope="module")
def overlapping(tiny_model_dirs):
    """Each step launched before the one before it is read back (EngineConfig.overlap)."""
    modes = {"recompute": {}, "caching": {"enable_prefix_caching": True},
             "swap": {"preemption_mode": "swap", "swap_space_gb": 3 * 2048 / 2 ** 30}}
    return {(p, m): make_engine(tiny_model_dirs["llama"], scheduling_policy=p, num_kv_blocks=12, max_model_len=48,
                                max_num_batched_tokens=12, max_num_seqs=4, overlap=True, **kw)
            for p in ("fcfs", "priority") for m, kw in modes.items()}


@pytest.mark.parametrize("mode", ["recompute", "caching", "swap"])
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=ops)
def test_random_add_abort_step_with_overlap(overlapping, policy, mode, seq):
    """Requests added and aborted while a step is in flight, preempted (dropped or swapped) and cached: no
    block or request lost; each event's tables are those of the step it reports, taken when it was counted."""
    _random_run(overlapping[policy, mode], seq)


@pytest.fixture(scope="module")
def drafting(tiny_model_dirs, tiny_draft_dirs):
    draft = {"ngram": {}, "draft": {"speculative_model": str(tiny_draft_dirs["llama"])}}
    return {(s, c, d): make_engine(tiny_model_dirs["llama"], strategy=s, num_kv_blocks=12, max_model_len=48,
                                   max_num_batched_tokens=12, max_num_seqs=4, static_batch_size=3,
                                   enable_prefix_caching=c, speculative=d, num_speculative_tokens=3, **draft[d])
            for s in STRATEGIES for c in (False, True) for d in draft}


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=ops)
def test_random_add_abort_step_with_drafts(drafting, strategy, caching, seq):
    """Speculative decoding, every row drafting (its last token again, so some drafts are kept and some
    rejected): blocks trimmed, reserved, shared and cached as ever."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("engine.scheduler.ngram.propose", lambda tokens, k: tokens[-1:] * k)
        _random_run(drafting[strategy, caching, "ngram"], seq)


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=ops)
def test_random_add_abort_step_with_a_draft_model(drafting, strategy, caching, seq):
    """A draft model's drafts (accepted in part) in the same pool layout: no block or request lost."""
    _random_run(drafting[strategy, caching, "draft"], seq)


def _random_run(eng, seq):
    _check_batches(eng)
    eng.runner.batches_differ.clear()
    added, want = [], {}
    for op in seq:
        if op[0] == "add":
            rid = eng.add_request([5 + i % 50 for i in range(op[1])], greedy(op[2]), priority=op[3], tenant=op[4])
            added.append(rid)
            want[rid] = op[2]
        elif op[0] == "abort" and added:
            eng.abort(added[op[1] % len(added)])
        else:
            for _ in range(op[1]):
                ev = eng.step()
                check_kv_invariants(eng)
                check_wire_kv(eng, ev)
                assert not eng.runner.batches_differ, eng.runner.batches_differ[0]
                # the event shows the cache's tables as they are after the step (overlap: as they were when
                # its tokens were counted, before the next step's schedule)
                if not eng.overlap:
                    assert ev.block_tables == {rid: list(t) for rid, t in eng.cache.block_tables.items()}
    eng.draining = True
    for _ in range(500):
        if not eng.has_unfinished():
            break
        check_wire_kv(eng, eng.step())
        check_kv_invariants(eng)
        assert not eng.runner.batches_differ, eng.runner.batches_differ[0]
    eng.draining = False
    check_drained(eng)
    for rid in added:
        out = eng.get_output(rid)
        assert out.finish_reason in ("length", "abort")
        if out.finish_reason == "length":
            assert len(out.output_token_ids) == want[rid]


def _check_batches(eng) -> None:
    """From now on every step's batch is built both ways before it runs, and they must be the same: runs of
    decode rows at once (PackedBatch.add_rows) and every row on its own (add); and where every row is a
    plain decode row, the DecodeBatch the engine runs then (going on from the step before's where it can,
    its tensors written in place) must send what a fresh DecodeBatch and a PackedBatch send."""
    from engine.model.decode_batch import DecodeBatch
    from engine.model.packed_batch import PackedBatch
    runner = eng.runner
    if "launch" in vars(runner):
        return  # wrapped already (the engines are the module's)
    run, forward, runner.batches_differ = runner.launch, runner.forward, []  # (a step's exception ends its
    # requests, not the test)

    def launch(rows, cache):
        at_once, one_by_one = PackedBatch(runner, cache), PackedBatch(runner, cache)
        at_once.add_rows(rows)
        for row in rows:
            one_by_one.add(row)
        if _layout(at_once) != _layout(one_by_one):
            runner.batches_differ.append((_layout(at_once), _layout(one_by_one)))
        return run(rows, cache)

    def checked_forward(batch):
        if isinstance(batch, DecodeBatch):  # (rows: each a plain decode row, in order)
            rows, at_once = batch.sample_rows, PackedBatch(runner, batch.cache)
            at_once.add_rows(rows)
            fresh, want = DecodeBatch(runner, batch.cache, rows), _sent(at_once)
            staged = [[a.tolist() for a in b.decode_arrays()] for b in (batch, fresh, at_once)]  # the graphs' inputs
            if _sent(fresh) != want or _sent(batch) != want or staged[0] != staged[2] or staged[1] != staged[2]:
                runner.batches_differ.append((_sent(batch), _sent(fresh), want))
        return forward(batch)
    runner.launch, runner.forward = launch, checked_forward


def _sent(batch) -> dict:
    """What a batch's upload sends, as plain values."""
    ids, pos, keep, meta = batch.upload()
    values = lambda t: None if t is None else t.tolist()  # noqa: E731
    return {"ids": values(ids), "positions": values(pos), "keep": values(keep), "write_idx": values(meta.write_idx),
            **{k: values(getattr(meta, k)) for k in ("write_slots", "decode_idx", "decode_blocks", "decode_ctx",
                                                     "prefill_layout")},
            "groups": meta.decode_groups, "prefills": len(meta.prefills), "num_tokens": meta.num_tokens}


def _layout(batch) -> dict:
    fields = {k: v for k, v in vars(batch).items() if k not in ("runner", "cache", "sample_rows")}
    return {**fields, "sample_rows": [id(r) for r in batch.sample_rows]}


def test_allocator_refcounts():
    a = BlockAllocator(4)
    blocks = a.allocate(3)
    a.incref(blocks[0])
    a.put_free(a.release(blocks))
    assert a.num_free == 3 and a.ref_count(blocks[0]) == 1
    assert a.release([blocks[0]]) == [blocks[0]]  # its last holder: free now, not yet on the free list
    a.put_free([blocks[0]])
    assert a.num_free == 4
    with pytest.raises(ValueError, match="double free"):
        a.release([blocks[0]])
    with pytest.raises(OutOfBlocks):
        a.allocate(5)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["grow", "trim", "free"]), st.integers(0, 99), st.integers(0, 80)),
                    max_size=60))
def test_the_table_matrix_follows_every_table(ops):
    """Tables grown, trimmed and freed at random, past the matrix's first rows and columns: it holds
    each as it is (what PackedBatch gathers a step's decode tables from), and the copies it keeps for
    step events equal them."""
    from engine.kv import KVCacheManager
    from engine_helpers import check_table_matrix
    c = KVCacheManager(600, 2)
    for rid in range(70):  # more requests than the matrix's first rows
        c.allocate(rid, 3)
    for op, rid, n in ops:
        if op == "grow":  # (past the matrix's first columns: 16 blocks)
            c.allocate(rid, n + len(c.block_tables.get(rid, ())) * 2)
        elif op == "trim" and rid in c.block_tables:
            c.trim(rid, n % (2 * len(c.block_tables[rid]) + 1))
        elif op == "free":
            c.free(rid)
        check_table_matrix(c)
        copies = c.tables.copies(c.block_tables)  # what a step event keeps: equal, never the cache's own lists
        assert copies == c.block_tables and all(copies[r] is not t for r, t in c.block_tables.items())


def test_cache_manager_grows_on_demand():
    c = KVCacheManager(num_blocks=5, block_size=4)
    assert c.allocate(7, 5) and len(c.block_tables[7]) == 2
    assert c.allocate(7, 8) and len(c.block_tables[7]) == 2   # still fits
    assert c.allocate(7, 9) and len(c.block_tables[7]) == 3
    assert not c.allocate(8, 12)                                # needs 3, 2 free: no partial allocation
    assert 8 not in c.block_tables and c.num_free == 2
    t = c.block_tables[7]
    assert c.slots(7, 3, 6) == [t[0] * 4 + 3, t[1] * 4, t[1] * 4 + 1]
    c.free(7)
    assert c.num_free == 5 and not c.block_tables
