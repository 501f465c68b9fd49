"""A decode-only step that goes on from the step before (DecodeBatch with `last`: on the CPU its tensors written
in place) sends exactly what a batch built afresh sends, whatever happened between the two steps: rows that went
on, blocks started, requests that came, ended, or were swapped out and in again with other blocks."""
from __future__ import annotations

import gc
import weakref
from itertools import count
from types import SimpleNamespace

import torch
from hypothesis import example, given, settings, strategies as st

from engine.kv import KVCacheManager
from engine.model.decode_batch import DecodeBatch
from engine_helpers import greedy, make_engine
from tiers import examples

BLOCK = 4


def runner() -> SimpleNamespace:
    """What a DecodeBatch reads of its runner: the device, the pool, no overlap."""
    return SimpleNamespace(device=torch.device("cpu"), pool=SimpleNamespace(block_size=BLOCK), last_tokens=None)


def sent(batch: DecodeBatch) -> dict:
    ids, pos, keep, meta = batch.upload()
    assert meta.rows_in_order == (meta.decode_idx.tolist() == list(range(meta.num_tokens)))  # (attention reads it)
    return {"ids": ids.tolist(), "positions": pos.tolist(), "keep": keep.tolist(), "num_tokens": meta.num_tokens,
            "write_idx": meta.write_idx, "slots": meta.write_slots.tolist(), "decode_idx": meta.decode_idx.tolist(),
            "tables": meta.decode_blocks.tolist(), "ctx": meta.decode_ctx.tolist(), "groups": meta.decode_groups,
            "prefills": meta.prefills, "layout": meta.prefill_layout.tolist(),
            "masks": meta._masks, "kernel_inputs": meta.kernel_inputs, "in_order": meta.rows_in_order}


# (prompts of a few lengths: requests at the same position, whose order only their identity tells apart)
ops = st.lists(st.one_of(st.tuples(st.just("step"), st.integers(1, 6)),
                         st.tuples(st.just("add"), st.sampled_from([3, 4, 9])),
                         st.tuples(st.sampled_from(["end", "swap", "rotate", "trim"]), st.integers(0, 99))),
               max_size=40)


@settings(max_examples=examples(150), deadline=None)
@given(ops=ops)
@example(ops=[("add", 3), ("add", 3), ("step", 1), ("rotate", 1), ("step", 1)])  # two at one position, swapped
def test_a_batch_that_goes_on_sends_what_a_fresh_one_sends(ops):
    cache, run = KVCacheManager(400, BLOCK), runner()
    running: list[SimpleNamespace] = []
    last, ids = None, count(0, 2)  # (a request's id + 1 is free: a swap's stand-in)
    for op, n in ops:
        if op == "add":
            req = SimpleNamespace(request_id=next(ids), num_computed_tokens=n, output_token_ids=[n % 7])
            cache.allocate(req.request_id, n)
            running.append(req)
        elif op == "rotate" and running:  # the same requests in another order (a policy's)
            k = n % len(running)
            running[:] = running[k:] + running[:k]
        elif op == "trim" and running:  # blocks past its next position cut (a draft's rejected tokens)
            req = running[n % len(running)]
            cache.allocate(req.request_id, req.num_computed_tokens + 2 * BLOCK)
            cache.trim(req.request_id, req.num_computed_tokens)
        elif op in ("end", "swap") and running:
            req = running[n % len(running)]
            cache.free(req.request_id)
            if op == "end":
                running.remove(req)
            else:  # back with other blocks (a new table-matrix row too)
                cache.allocate(req.request_id + 1, 3 * BLOCK)  # (takes the freed blocks first)
                cache.allocate(req.request_id, req.num_computed_tokens)
                cache.free(req.request_id + 1)
        elif op == "step" and running:
            for i in range(n):
                for req in running:  # the scheduler's room for each row's token, then the batch
                    cache.allocate(req.request_id, req.num_computed_tokens + 1)
                rows = [SimpleNamespace(request=q) for q in running]
                batch = DecodeBatch(run, cache, rows, last)
                assert i == 0 or batch.tail.inputs is not None  # (nothing but this between: it goes on)
                assert sent(batch) == sent(DecodeBatch(runner(), cache, rows)), (op, n)
                meta = batch.upload()[3]  # what a forward leaves on it: each group's mask, the kernels' inputs
                for group in meta.groups():
                    meta.decode_mask(group, None)
                meta.kernel_inputs = object()
                last = batch.tail
                for req in running:  # its token sampled, counted
                    req.num_computed_tokens += 1
                    req.output_token_ids.append((req.num_computed_tokens * 31) % 97)


def test_the_step_after_writes_into_the_same_tensors_and_a_swap_between_makes_new_ones():
    cache, run = KVCacheManager(64, BLOCK), runner()
    reqs = [SimpleNamespace(request_id=i, num_computed_tokens=2 + 3 * i, output_token_ids=[i]) for i in range(3)]
    rows = [SimpleNamespace(request=q) for q in reqs]

    def step(last):
        """A step's batch going on from `last` where it can: (its tail, the BatchMeta its forward reads)."""
        for q in reqs:
            cache.allocate(q.request_id, q.num_computed_tokens + 1)
        batch = DecodeBatch(run, cache, rows, last)
        meta = batch.upload()[3]
        for q in reqs:
            q.num_computed_tokens += 1
            q.output_token_ids.append(5)
        return batch.tail, meta

    first, meta1 = step(None)
    second, meta2 = step(first)
    assert meta2 is meta1  # its tensors written in place
    cache.free(1)
    cache.allocate(1, reqs[1].num_computed_tokens)  # swapped out and in again between two steps
    _, meta3 = step(second)
    assert meta3 is not meta2


def test_an_engine_dropped_after_decode_steps_is_freed_by_reference_counting_alone(tiny_model_dirs):
    """The runner keeps the last decode-only step's tail, which refers to nothing that refers to the runner: a
    lane's engine is frozen out of the collector's sight once loaded, so a cycle through it would keep its
    weights and KV pool for the process's life."""
    eng = make_engine(tiny_model_dirs["llama"])
    eng.generate([[5, 6, 7]], [greedy(6)])
    assert eng.runner.last_decode is not None and eng.runner.last_decode.inputs is not None
    runner, pool = weakref.ref(eng.runner), weakref.ref(eng.runner.pool)
    gc.disable()
    try:
        del eng
        assert runner() is None and pool() is None
    finally:
        gc.enable()
