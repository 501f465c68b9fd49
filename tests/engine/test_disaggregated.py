"""A disaggregated lane (EngineConfig.disaggregated): a prefill engine and a decode engine, each with its own
KV pool and thread, a request's blocks copied from one pool to the other after its first token. Greedy
outputs equal the reference model's across the hand-off; every step says which half ran, what it handed
on and each copy's blocks, bytes and seconds; no block of either pool is lost, an abort at any moment
(mid-transfer included) ends the request and frees its blocks on both sides."""
from __future__ import annotations

import random
import threading
import time
from concurrent.futures import wait
from contextlib import ExitStack, closing

import pytest
from engine_helpers import check_kv_invariants, greedy, mixed_prompts
from tiny_models import FAMILIES, reference_greedy

from engine import EngineConfig, SamplingParams
from engine.disaggregated import DisaggregatedEngine, half_configs
from engine.events import DECODE_PART, PREFILL_PART
from engine.scheduler import waits

BASE = dict(device="cpu", dtype="float32", block_size=4, num_kv_blocks=128, max_model_len=128, max_num_seqs=8,
            max_num_batched_tokens=32)


def make(model_dir, **overrides) -> DisaggregatedEngine:
    return DisaggregatedEngine(EngineConfig(model=str(model_dir), disaggregated=True, **{**BASE, **overrides}))


@pytest.fixture
def new_lane():
    """make(), closed at the test's end whatever happens (each lane, even if another's close raises)."""
    with ExitStack() as lanes:
        yield lambda model_dir, **overrides: lanes.enter_context(closing(make(model_dir, **overrides)))


def step_until(eng, done, limit: int = 2000) -> list:
    """Step until done(the events so far); the events. A lost request fails the test at `limit` steps
    instead of hanging it."""
    events = []
    while not done(events):
        assert len(events) < limit, f"not done after {limit} steps"
        events.append(eng.step())
    return events


def drain(eng: DisaggregatedEngine) -> list:
    """Step until nothing is left; every event says its half."""
    events = step_until(eng, lambda _: not eng.has_unfinished())
    assert all(ev.part in (PREFILL_PART, DECODE_PART) for ev in events)
    return events


def check_both_pools_empty(eng: DisaggregatedEngine) -> None:
    prefill, decode = eng.halves
    for e in eng.halves:
        check_kv_invariants(e)
        assert e.cache.num_free == e.cache.num_blocks, f"{e is prefill and 'prefill' or 'decode'} pool holds blocks"
    assert not prefill.hand_offs.sent and not decode.cache.incoming and not decode.cache.returned


def test_config_needs_continuous_and_splits_the_kv_memory():
    with pytest.raises(ValueError, match="EngineConfig.disaggregated"):
        EngineConfig(strategy="static", disaggregated=True)
    with pytest.raises(ValueError, match="EngineConfig.disaggregated"):
        EngineConfig(disaggregated=1)
    p, d = half_configs(EngineConfig(model="m", device="cpu", disaggregated=True, num_kv_blocks=100))
    assert (p.num_kv_blocks, d.num_kv_blocks, p.disaggregated) == (50, 50, False)
    p, _ = half_configs(EngineConfig(model="m", device="cpu", disaggregated=True, kv_cache_memory_gb=1.0))
    assert p.kv_cache_memory_gb == 0.5


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_outputs_equal_the_reference_across_the_hand_off(tiny_model_dirs, family, new_lane):
    eng = new_lane(tiny_model_dirs[family])
    prompts, max_tokens = mixed_prompts(10)
    outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
    ref = reference_greedy(tiny_model_dirs[family], prompts, max_tokens)
    assert [o.output_token_ids for o in outs] == ref
    check_both_pools_empty(eng)
    assert eng.decode.engine.mover.moved["handoff"].blocks > 0


@pytest.mark.parametrize("setting", ["prefix cache", "ngram drafts", "draft model", "swap"])
def test_equality_holds_with_the_engine_modes_that_move_kv_too(tiny_model_dirs, tiny_draft_dirs, setting, new_lane):
    """The hand-off copies every pool of the block layout (a draft model's too); prefix caching and swap
    preemption work on either half as on one engine."""
    kw = {"prefix cache": dict(enable_prefix_caching=True),
          "ngram drafts": dict(speculative="ngram"),
          "draft model": dict(speculative="draft", speculative_model=str(tiny_draft_dirs["llama"])),
          "swap": dict(preemption_mode="swap", num_kv_blocks=40, max_model_len=64, swap_space_gb=0.001)}[setting]
    eng = new_lane(tiny_model_dirs["llama"], **kw)
    prompts, max_tokens = mixed_prompts(12, seed=4)
    if setting == "prefix cache":  # a shared start: later prompts hit the prefill half's cached blocks
        prompts = [list(range(3, 20)) + p for p in prompts]
    max_tokens = [m + 1 for m in max_tokens]
    outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["llama"], prompts, max_tokens)
    check_both_pools_empty(eng)
    if setting == "prefix cache":
        assert any(o.num_cached_tokens for o in outs), "no prefix hit survived the hand-off"
    if setting == "draft model":
        assert eng.decode.engine.drafter is not None and eng.decode.engine.mover.moved["handoff"].blocks > 0


def test_every_step_says_its_half_and_each_hand_off_is_timed(tiny_model_dirs, new_lane):
    eng = new_lane(tiny_model_dirs["llama"])
    prompts, max_tokens = mixed_prompts(8, seed=3)
    ids = [eng.add_request(p, greedy(m + 1)) for p, m in zip(prompts, max_tokens)]
    events = drain(eng)
    handed = [rid for ev in events if ev.part == PREFILL_PART for rid in ev.handed_off]
    copied = {h[0]: h for ev in events if ev.part == DECODE_PART for h in ev.handoffs}
    assert sorted(handed) == sorted(copied) == sorted(ids)  # max_tokens >= 2: every one is handed on
    for rid, blocks, nbytes, seconds in copied.values():
        assert blocks >= 1 and nbytes > 0 and seconds >= 0
    # prefill rows only on the prefill half, decode rows only on the decode half
    assert {e.phase for ev in events if ev.part == PREFILL_PART for e in ev.entries} == {"prefill"}
    assert {e.phase for ev in events if ev.part == DECODE_PART for e in ev.entries} == {"decode"}
    assert [ev.step for ev in events if ev.entries] == sorted({ev.step for ev in events if ev.entries})
    check_both_pools_empty(eng)


def test_a_full_decode_pool_holds_requests_back_and_loses_nothing(tiny_model_dirs, new_lane):
    # 16 blocks of 4 tokens a half: a few long requests fill the decode pool, the rest wait there with
    # their KV still in the prefill pool, which then makes the prefill half wait for blocks too
    eng = new_lane(tiny_model_dirs["llama"], num_kv_blocks=32, max_model_len=64)
    prompts, _ = mixed_prompts(12, seed=5)
    ids = [eng.add_request(p, greedy(20)) for p in prompts]
    events = drain(eng)
    outs = [eng.pop_output(rid) for rid in ids]
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["llama"], prompts, [20] * 12)
    short = [w for ev in events if ev.part == DECODE_PART for w in ev.waits.values() if w]
    assert any(w["why"] == waits.KV_BLOCKS for w in short), "the decode pool never ran short"
    check_both_pools_empty(eng)


@pytest.mark.parametrize("seed", range(6))
def test_aborts_at_any_moment_end_the_request_and_free_both_pools(tiny_model_dirs, seed, new_lane):
    """Requests aborted at random points (queued, prefilling, handed on but not yet copied, decoding)
    end as aborted; the others still equal the reference; both pools end empty."""
    rng = random.Random(seed)
    eng = new_lane(tiny_model_dirs["llama"], num_kv_blocks=64)
    prompts, max_tokens = mixed_prompts(10, seed=seed)
    ids = [eng.add_request(p, greedy(m + 2)) for p, m in zip(prompts, max_tokens)]
    doomed = set(rng.sample(ids, 4))
    ended = set()
    for _ in range(2000):  # bounded: a lost request fails the test instead of hanging it
        if not eng.has_unfinished():
            break
        ev = eng.step()
        for rid in list(doomed):
            in_transfer = rid in ev.handed_off or rid in eng.prefill.engine.hand_offs.sent
            if rng.random() < (0.9 if in_transfer else 0.2):
                eng.abort(rid, "test abort")
                doomed.discard(rid)
                ended.add(rid)
    assert not eng.has_unfinished()
    outs = {rid: eng.pop_output(rid) for rid in ids}
    ref = reference_greedy(tiny_model_dirs["llama"], prompts, [m + 2 for m in max_tokens])
    for rid, want in zip(ids, ref):
        if rid in ended and outs[rid].finish_reason == "abort":
            assert want[:len(outs[rid].output_token_ids)] == outs[rid].output_token_ids
        else:
            assert outs[rid].output_token_ids == want
    check_both_pools_empty(eng)


def test_an_abort_of_a_request_in_transfer_frees_its_prefill_blocks(tiny_model_dirs, new_lane):
    eng = new_lane(tiny_model_dirs["llama"])
    prompts, _ = mixed_prompts(3, seed=1)
    ids = [eng.add_request(p, greedy(10)) for p in prompts]
    step_until(eng, lambda _: any(rid in eng.prefill.engine.hand_offs.sent for rid in ids))
    sent = [rid for rid in ids if rid in eng.prefill.engine.hand_offs.sent]
    rid = sent[0]
    eng.abort(rid, "gone")
    drain(eng)
    out = eng.pop_output(rid)
    assert out.finish_reason == "abort" and len(out.output_token_ids) >= 1
    check_both_pools_empty(eng)


def test_sampled_requests_keep_their_seeded_stream_across_the_hand_off(tiny_model_dirs, new_lane):
    eng = new_lane(tiny_model_dirs["llama"])
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=7, ignore_eos=True)
    prompt = list(range(5, 30))
    one = eng.generate([prompt], params)[0].output_token_ids
    two = eng.generate([prompt], params)[0].output_token_ids
    assert one == two and len(one) == 12


def test_a_disaggregated_lane_serves_beside_a_colocated_one(tiny_model_dirs):
    """In the service: the same greedy text on both lanes, every event passes the wire contract's check
    (the halves' parts, hand-offs), the lane's header says what it is, and both pools end empty."""
    from service_helpers import assert_all_free, make_service

    from engine.events import StepMessage
    from engine.events_check import check_event
    from engine.serving.lanes import lane_headers
    lanes = {"colocated": EngineConfig(**BASE, model=str(tiny_model_dirs["llama"])),
             "split": EngineConfig(**BASE, model=str(tiny_model_dirs["llama"]), disaggregated=True)}
    assert lane_headers(lanes)["split"] == ["prefill/decode disaggregated"]
    svc = make_service(tiny_model_dirs["llama"], **BASE)
    try:
        svc.set_lanes(lanes)
        svc.wait_ready(120)
        cursor = svc.hub.head
        prompts, max_tokens = mixed_prompts(6, seed=2)
        handles = [svc.submit(p, greedy(m + 1)) for p, m in zip(prompts, max_tokens)]
        for pair in handles:
            colocated, split = (h.result(60) for h in pair)
            assert split.output_token_ids == colocated.output_token_ids and split.text == colocated.text
        steps = [ev for _, ev in svc.hub.read(cursor).events if isinstance(ev, StepMessage) and ev.lane == "split"]
        for ev in steps:
            check_event(ev.wire() if hasattr(ev, "wire") else ev.to_dict())
        assert {ev.event.part for ev in steps} == {PREFILL_PART, DECODE_PART}
        assert any(ev.event.handoffs for ev in steps)
        assert_all_free(svc)
        split = svc.workers["split"].engine
        check_both_pools_empty(split)
    finally:
        svc.stop()


def test_a_step_that_only_swaps_out_still_copies_the_blocks(tiny_model_dirs):
    """The prefill half's pool can fill with blocks held for hand-offs: its only running request then
    preempts itself, a step with no rows but a swap-out, whose copy must run (it resumes from it)."""
    from engine_helpers import make_engine
    eng = make_engine(tiny_model_dirs["llama"], num_kv_blocks=16, max_model_len=64, max_num_seqs=1,
                      max_num_batched_tokens=8, preemption_mode="swap", swap_space_gb=0.001)
    eng.hand_off_requests()
    prompts = [list(range(5, 45)), list(range(50, 90))]  # 40 tokens each: 10 of the 16 blocks
    a, b = (eng.add_request(p, greedy(4)) for p in prompts)
    events = step_until(eng, lambda evs: any(b in ev.preempted for ev in evs))
    only_swap = events[-1]
    assert not only_swap.entries and only_swap.swaps == [[b, "out", 6]] and a in eng.hand_offs.sent
    eng.hand_offs.release([a])  # the decode half copied a's blocks: b comes back from the host pool
    step_until(eng, lambda _: b in eng.hand_offs.sent)
    first = eng.hand_offs.sent[b].output_token_ids
    assert first == reference_greedy(tiny_model_dirs["llama"], [prompts[1]], [1])[0]
    assert eng.recomputed_tokens == 0


def test_only_step_starts_steps_so_a_paused_lane_computes_nothing(tiny_model_dirs, new_lane):
    """The worker does not call step() while the presenter has paused: adding or aborting requests then
    must not start a step on either half."""
    eng = new_lane(tiny_model_dirs["llama"])
    rids = [eng.add_request(list(range(5, 25)), greedy(6)) for _ in range(3)]
    eng.abort(rids[0])
    assert all(h.inflight is None for h in (eng.prefill, eng.decode))
    assert eng.prefill.engine.step_count == 0 and eng.pop_output(rids[0]).finish_reason == "abort"
    ev = eng.step()
    assert ev.part == PREFILL_PART and ev.entries
    drain(eng)
    check_both_pools_empty(eng)


def test_a_failed_step_ends_every_request_and_the_lane_serves_on(tiny_model_dirs):
    """A step that raises (chaos: before a step) resets the lane while a half is mid-step: every request
    in flight ends (finished, or with the error), nothing hangs, no block is held, and the lane serves on
    with outputs equal to the reference."""
    from service_helpers import make_service
    svc = make_service(tiny_model_dirs["llama"], **BASE)
    try:
        svc.set_lanes({"split": EngineConfig(**BASE, model=str(tiny_model_dirs["llama"]), disaggregated=True)})
        svc.wait_ready(120)
        calls = iter(range(10_000))

        def chaos(lane):
            if next(calls) == 6:
                raise RuntimeError("chaos: the step failed")
        svc.step_fault = chaos
        prompts, max_tokens = mixed_prompts(8, seed=6)
        handles = [svc.submit(p, greedy(m + 4))[0] for p, m in zip(prompts, max_tokens)]
        outs = [h.result(60) for h in handles]
        assert {o.finish_reason for o in outs} <= {"length", "error"} and "error" in {o.finish_reason for o in outs}
        svc.step_fault = None
        again = [svc.submit(p, greedy(m + 4))[0].result(60) for p, m in zip(prompts, max_tokens)]
        want = reference_greedy(tiny_model_dirs["llama"], prompts, [m + 4 for m in max_tokens])
        assert [o.output_token_ids for o in again] == want
        deadline = time.monotonic() + 10
        eng = svc.workers["split"].engine
        while eng.has_unfinished() and time.monotonic() < deadline:
            time.sleep(0.01)
        check_both_pools_empty(eng)
    finally:
        svc.step_fault = None
        svc.stop()


def test_a_closed_lane_gives_its_cores_back_and_a_stalled_prefill_does_not_spin(tiny_model_dirs, new_lane):
    """The halves leave the core share when the lane rests or closes (another lane then gets every core);
    a prefill half whose pool is full of blocks held for hand-offs steps again only when something is
    handed to it; each half's tokenizer is its own."""
    from engine.cpu_share import CORES
    eng = new_lane(tiny_model_dirs["llama"], num_kv_blocks=32, max_model_len=64)
    prefill = eng.prefill.engine
    calls, empty = [0], [0]
    step = prefill.step

    def counted():
        ev = step()
        calls[0] += 1
        empty[0] += not ev.entries
        return ev
    prefill.step = counted
    prompts, _ = mixed_prompts(12, seed=5)
    eng.generate(prompts, greedy(20))
    assert empty[0] <= 2 * len(prompts), f"{empty[0]} of {calls[0]} prefill steps computed nothing"
    assert len({id(eng.tokenizer), id(prefill.tokenizer), id(eng.decode.engine.tokenizer)}) == 3
    eng.rest()
    assert not {eng.prefill, eng.decode} & CORES._busy.keys()
    eng.close()
    assert not {eng.prefill, eng.decode} & CORES._busy.keys()


def test_a_half_that_fails_mid_step_fails_the_next_step_whoever_lands_it(tiny_model_dirs, new_lane):
    """A half's step that raises lands in whichever call comes next (here add_request, which must not
    raise for it): step() raises it, the caller resets, every request ends and the lane serves on."""
    eng = new_lane(tiny_model_dirs["llama"])
    decode = eng.decode.engine
    real, broken = decode.step, threading.Event()

    def step():
        if broken.is_set():
            raise RuntimeError("the decode half's forward failed")
        return real()
    decode.step = step
    prompts, _ = mixed_prompts(4, seed=8)
    ids = [eng.add_request(p, greedy(12)) for p in prompts]
    step_until(eng, lambda _: eng.decode.engine.requests)
    broken.set()
    eng._sync(launch=True)  # the decode half mid-step, as between two of the worker's step() calls
    wait([eng.decode.inflight])
    late = eng.add_request(list(range(7, 19)), greedy(3))  # lands the failed step
    with pytest.raises(RuntimeError, match="decode half's forward failed"):
        step_until(eng, lambda _: False)
    broken.clear()
    ended = eng.reset("engine step failed")
    assert set(ids + [late]) <= set(ended) | set(eng.outputs.finished)
    assert all(eng.get_output(rid).finish_reason in ("error", "length") for rid in ids + [late])
    drain(eng)  # the halves report the requests reset ended (as an LLMEngine's next step does)
    check_both_pools_empty(eng)
    out = eng.generate([prompts[0]], greedy(5))[0]
    assert out.output_token_ids == reference_greedy(tiny_model_dirs["llama"], [prompts[0]], [5])[0]


def test_an_abort_ends_the_request_at_once_even_when_its_half_is_mid_step(tiny_model_dirs, new_lane):
    """As on one engine: abort() returns True and the output is there (it waits for the half's step to
    land: a paused lane's cancelled request is not left hanging)."""
    eng = new_lane(tiny_model_dirs["llama"])
    prompts, _ = mixed_prompts(3, seed=9)
    ids = [eng.add_request(p, greedy(30)) for p in prompts]
    step_until(eng, lambda _: any(r in eng.decode.engine.requests for r in ids))
    rid = next(r for r in ids if r in eng.decode.engine.requests)
    eng._sync(launch=True)  # the decode half mid-step, as between two of the worker's step() calls
    assert eng.decode.inflight is not None
    assert eng.abort(rid, "cancelled") is True
    assert eng.live_text(rid) is None and eng.pop_output(rid).finish_reason == "abort"
    drain(eng)
    check_both_pools_empty(eng)
