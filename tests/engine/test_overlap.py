"""EngineConfig.overlap: each step is launched before the one before it is read back, its input tokens taken
on the device. Outputs equal generate() and the engine without overlap, token for token, stops included;
no request or KV block is lost, whatever ends a request while a step is in flight."""
from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import LLMEngine, SamplingParams
from engine.config import EngineConfig
from engine.kv import cache_manager
from engine.model.device_tokens import SampledTokens
from engine.events_check import check_event
from engine.request import PENDING_TOKEN
from engine_helpers import check_drained, check_kv_invariants, check_wire_kv, greedy, make_engine, mixed_prompts
from engine_helpers import run_checked
from tiers import examples
from tiny_models import FAMILIES, reference_greedy

SMALL_POOL = dict(num_kv_blocks=24, max_model_len=64, max_num_batched_tokens=16)  # 10 requests must preempt


@pytest.fixture(scope="module")
def references(tiny_model_dirs):
    prompts, max_tokens = mixed_prompts(10)
    return prompts, max_tokens, {f: reference_greedy(tiny_model_dirs[f], prompts, max_tokens) for f in FAMILIES}


def _run_ahead(eng, prompts, params):
    """run_checked, also checking every event on the wire and that steps were launched ahead."""
    ahead = []
    step = eng.step

    def checked_step():
        ev = step()
        check_event(ev.to_dict())
        check_wire_kv(eng, ev)
        ahead.append(eng.in_flight is not None)
        return ev
    eng.step = checked_step
    outs, events = run_checked(eng, prompts, params)
    assert sum(ahead) >= len(ahead) // 2, "steps were not launched ahead"
    return outs, events


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", [{}, {"preemption_mode": "swap"}, {"enable_prefix_caching": True},
                                  {"scheduling_policy": "priority"}, {"scheduling_policy": "sjf"}])
def test_overlap_matches_generate(tiny_model_dirs, references, family, mode):
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs[family], overlap=True, **SMALL_POOL, **mode)
    outs, events = _run_ahead(eng, prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == refs[family]
    assert all(o.finish_reason == "length" for o in outs)
    assert any(ev.preempted for ev in events), "the small pool should force a preemption"
    check_events_tell_one_story(events)


def check_events_tell_one_story(events) -> None:
    """A request computes and holds blocks only between its admission and its finish or preemption, as the
    events tell them in order; each row's context holds its new tokens; times run forward."""
    admitted, ended = set(), set()
    for ev in events:
        admitted |= set(ev.admitted)
        assert all(e.request_id in admitted and e.context_len >= e.num_tokens > 0 for e in ev.entries), ev.step
        assert set(ev.block_tables) <= admitted and not set(ev.block_tables) & ended, ev.step
        admitted -= set(ev.preempted) | set(ev.finished)
        ended |= set(ev.finished)
        assert not set(ev.preempted) & set(ev.block_tables), f"step {ev.step}: a preempted request holds blocks"
        assert ev.t_start <= ev.t_end
    assert all(a.t_end <= b.t_start for a, b in zip(events, events[1:]))


def _same_outputs(model_dir, prompts, params, **cfg):
    """Outputs (tokens, text, finish) of the engine with overlap and without, on the same requests."""
    got = []
    for overlap in (False, True):
        eng = make_engine(model_dir, overlap=overlap, **cfg)
        outs, _ = (_run_ahead if overlap else run_checked)(eng, prompts, params)
        got.append([(o.output_token_ids, o.text, o.finish_reason) for o in outs])
    assert got[1] == got[0]
    assert all(PENDING_TOKEN not in toks for toks, _, _ in got[1])


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), family=st.sampled_from(FAMILIES))
def test_stops_and_seeded_sampling_equal_without_overlap(tiny_model_dirs, seed, family):
    """Requests that stop at an end token, a stop token or a stop string in the middle of a step in flight,
    reach max_tokens, or sample with a seed: the same tokens, text and finish with overlap as without."""
    rng = random.Random(seed)
    prompts, max_tokens = mixed_prompts(8, seed=seed)
    refs = reference_greedy(tiny_model_dirs[family], prompts, max_tokens)
    params = []
    for ref, m in zip(refs, max_tokens):
        at = rng.randrange(len(ref))
        kind = rng.choice(["stop_token", "eos", "length", "seeded", "stop_string"])
        if kind == "stop_token":
            params.append(greedy(m, stop_token_ids=[ref[at]]))
        elif kind == "eos":
            params.append(greedy(m, ignore_eos=False))
        elif kind == "seeded":
            params.append(SamplingParams(max_tokens=m, temperature=0.9, top_p=0.9, seed=rng.randrange(99),
                                         ignore_eos=True))
        elif kind == "stop_string":
            params.append(greedy(m, stop=[chr(97 + rng.randrange(26))]))
        else:
            params.append(greedy(m))
    _same_outputs(tiny_model_dirs[family], prompts, params, **SMALL_POOL,
                  preemption_mode=rng.choice(["recompute", "swap"]))


def test_aborts_and_resets_while_a_step_is_in_flight(tiny_model_dirs, references):
    """A request aborted while a step that computes it is in flight ends without a pending token; the others
    still equal generate(); a reset drops the step in flight; no block is lost."""
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs["llama"], overlap=True, **SMALL_POOL)
    ids = [eng.add_request(p, greedy(m + 5)) for p, m in zip(prompts, max_tokens)]
    aborted = set()
    while eng.has_unfinished():
        eng.step()
        check_kv_invariants(eng)
        computing = {r.request.request_id for r in eng.in_flight.sched.rows} if eng.in_flight else set()
        live = [rid for rid in ids[1::3] if rid in computing and eng.requests[rid].output_token_ids]
        if live:
            assert eng.abort(live[0])
            aborted.add(live[0])
    assert aborted, "no request was aborted while a step was in flight"
    for i, rid in enumerate(ids):
        out = eng.get_output(rid)
        assert PENDING_TOKEN not in out.output_token_ids
        if rid in aborted:
            assert out.finish_reason == "abort"
            assert out.output_token_ids == reference_greedy(tiny_model_dirs["llama"], [prompts[i]],
                                                            [len(out.output_token_ids)])[0]
    check_drained(eng)
    eng.add_request(prompts[0], greedy(20))
    eng.step(), eng.step()
    assert eng.in_flight is not None
    assert eng.reset("test") and eng.in_flight is None
    check_drained(eng)


def test_overlap_is_refused_where_a_step_needs_the_one_before_it(tiny_model_dirs):
    for blocker, why in [({"strategy": "static"}, "strategy 'static'"), ({"speculative": "ngram"}, "speculative"),
                         ({"scheduling_policy": "fair"}, "'fair' policy"), ({"scheduling_policy": "slo"}, "'slo'"),
                         ({"disaggregated": True}, "disaggregated")]:
        with pytest.raises(ValueError, match=f"EngineConfig.overlap must be None or False with .*{why}"):
            EngineConfig(model=str(tiny_model_dirs["llama"]), overlap=True, **blocker)
    with pytest.raises(ValueError, match="EngineConfig.overlap must be None, True or False"):
        EngineConfig(model=str(tiny_model_dirs["llama"]), overlap="yes")
    assert make_engine(tiny_model_dirs["llama"]).overlap is False  # the default: on CUDA only
    assert make_engine(tiny_model_dirs["llama"], overlap=True).runner.last_tokens is not None


def test_the_next_step_is_launched_before_this_one_is_read_back(tiny_model_dirs, monkeypatch):
    """What lets the GPU run step N+1 while the host settles step N: on the host, N+1's launch comes before
    N's tokens are read (a read before it would make the host wait for the GPU with nothing queued)."""
    eng = make_engine(tiny_model_dirs["llama"], overlap=True)
    log, launch, read = [], eng.runner.launch, SampledTokens.tolist
    monkeypatch.setattr(eng.runner, "launch", lambda *a: log.append("launch") or launch(*a))
    monkeypatch.setattr(SampledTokens, "tolist", lambda self: log.append("read") or read(self))
    eng.add_request([5, 6, 7, 8], greedy(12))
    while eng.has_unfinished():
        eng.step()
    order = "".join("L" if x == "launch" else "R" for x in log)
    assert re.fullmatch(r"LL(RL)+RR?", order), order  # each read after the next launch (without overlap: LRLR...)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_step_is_timed_from_before_its_schedule(tiny_model_dirs, overlap):
    ticks = itertools.count()
    eng = LLMEngine(EngineConfig(model=str(tiny_model_dirs["llama"]), device="cpu", overlap=overlap),
                    clock=lambda: float(next(ticks)))
    schedule, scheduled = eng.scheduler.schedule, []
    eng.scheduler.schedule = lambda: scheduled.append(schedule()) or scheduled[-1]
    eng.add_request([5, 6, 7], greedy(4))
    events = [eng.step() for _ in range(3)]
    assert events[0].t_start < scheduled[0].t_scheduled < events[0].t_end
    for before, ev, out in zip(events, events[1:], scheduled[1:]):
        if overlap:  # scheduled while the step before was settled: timed from where that one's event ended
            assert out.t_scheduled < before.t_end <= ev.t_start < ev.t_end
        else:
            assert before.t_end <= ev.t_start < out.t_scheduled < ev.t_end


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), blocks=st.integers(12, 20))
def test_no_prefix_hash_covers_a_pending_token(tiny_model_dirs, monkeypatch, seed, blocks):
    """A request preempted while its last token is pending is not looked up in (or hashed for) the prefix
    cache until that token is known."""
    hashed = cache_manager.extend_block_hashes

    def checked(hashes, tokens, block_size):
        assert PENDING_TOKEN not in tokens[:len(tokens) // block_size * block_size], "a hash over a pending token"
        return hashed(hashes, tokens, block_size)
    monkeypatch.setattr(cache_manager, "extend_block_hashes", checked)
    prompts, max_tokens = mixed_prompts(8, seed=seed)
    eng = make_engine(tiny_model_dirs["qwen2"], overlap=True, enable_prefix_caching=True, num_kv_blocks=blocks,
                      max_model_len=48, max_num_batched_tokens=16)
    run_checked(eng, [p[:20] for p in prompts], [greedy(m) for m in max_tokens])


@pytest.mark.parametrize("where", ["launch", "read back"])
def test_a_step_that_fails_ends_its_requests_and_no_one_elses(tiny_model_dirs, references, monkeypatch, where):
    """A forward that raises (launched, or when its tokens are read back) ends the requests of its step with
    the error; the others still equal generate(); nothing is left pending or held."""
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs["llama"], overlap=True, **SMALL_POOL)
    target = (eng.runner, "launch") if where == "launch" else (SampledTokens, "tolist")
    real, calls = getattr(*target), itertools.count()

    def failing(*a, **k):
        if next(calls) == 6:
            raise RuntimeError("the device fell over")
        return real(*a, **k)
    monkeypatch.setattr(*target, failing)
    outs, _ = run_checked(eng, prompts, [greedy(m) for m in max_tokens])
    failed = [i for i, o in enumerate(outs) if o.finish_reason == "error"]
    assert failed and all("the device fell over" in outs[i].error for i in failed)
    for i, o in enumerate(outs):
        assert PENDING_TOKEN not in o.output_token_ids
        expect = refs["llama"][i] if i not in failed else refs["llama"][i][:len(o.output_token_ids)]
        assert o.output_token_ids == expect


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the GPU's own streams, graphs and copies")
@pytest.mark.parametrize("family,mode,compiled", [
    ("llama", {}, None),  # every default: the graphs' forward compiled too
    ("qwen3", {}, False), ("llama", {"preemption_mode": "swap", "enable_prefix_caching": True}, False)])
def test_overlap_on_a_gpu_matches_generate(tiny_model_dirs, references, family, mode, compiled):
    """On CUDA with the defaults (Triton attention, graph buckets, overlap on by default; the forward
    compiled in one case, the others not, to be quick): the steps read back one behind, preempting,
    swapping and caching prefixes, still give generate()'s tokens."""
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs[family], device="cuda", torch_compile=compiled, **SMALL_POOL, **mode)
    assert eng.overlap and eng.runner.graphs is not None
    outs, events = _run_ahead(eng, prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == refs[family]
    assert any(ev.preempted for ev in events)


def test_pending_inputs_are_only_decode_rows_and_fill_takes_the_last_tokens():
    from engine.model.device_tokens import LastTokens
    from engine.model.device_tokens import pending_inputs
    P = PENDING_TOKEN
    ids, dec_idx, dec_row = np.array([7, P, 8, P]), np.array([1, 3]), np.array([5, 2])
    rows, top, every = pending_inputs(ids, dec_idx, dec_row)
    assert rows.tolist() == [0, 5, 0, 2] and top == 5 and not every
    assert pending_inputs(np.array([P, P]), np.array([0, 1]), np.array([3, 4]))[2]
    assert pending_inputs(np.array([7, 8]), np.array([0, 1]), np.array([3, 4])) is None  # nothing pending
    with pytest.raises(RuntimeError, match="not a plain decode"):
        pending_inputs(np.array([P, P, 9]), np.array([1]), np.array([3]))  # a prefill's token pending
    last = LastTokens(torch.device("cpu"))
    last.keep(np.array([5, 2, 70]), torch.tensor([50, 20, 700]))  # (row 70: the table grows)
    got = torch.tensor(ids)
    last.fill(got, torch.from_numpy(rows), top, every)
    assert got.tolist() == [7, 50, 8, 20]
    every_pending = torch.tensor([P, P, P])
    last.fill(every_pending, torch.tensor([70, 2, 5]), 70, True)
    assert every_pending.tolist() == [700, 20, 50]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the GPU's own streams, graphs and copies")
def test_seeded_sampling_on_a_gpu_is_the_same_with_overlap(tiny_model_dirs):
    """Seeded rows draw from their own generators on the device, whatever step reads them back."""
    prompts, max_tokens = mixed_prompts(8, seed=3)
    params = [SamplingParams(max_tokens=m, temperature=0.8, top_k=20, seed=i, ignore_eos=True)
              for i, m in enumerate(max_tokens)]
    _same_outputs(tiny_model_dirs["llama"], prompts, params, device="cuda", torch_compile=False, **SMALL_POOL)
