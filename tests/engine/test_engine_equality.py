"""Greedy outputs of every strategy equal Hugging Face generate(), token for token."""
from __future__ import annotations

import pytest

from engine.config import SCHEDULING_POLICIES, STRATEGIES
from engine.events import FinishedEvent
from engine.events_check import check_event
from engine_helpers import check_drained, greedy, make_engine, mixed_prompts, run_checked
from tiny_models import FAMILIES, reference_greedy

N = 10


@pytest.fixture(scope="module")
def references(tiny_model_dirs):
    prompts, max_tokens = mixed_prompts(N)
    return prompts, max_tokens, {f: reference_greedy(tiny_model_dirs[f], prompts, max_tokens) for f in FAMILIES}


def _run(eng, prompts, max_tokens, priorities=None, tenants=None):
    return run_checked(eng, prompts, [greedy(m) for m in max_tokens], priority=priorities or [0] * len(prompts),
                       tenant=tenants or [None] * len(prompts))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", ["continuous", "static", "dynamic"])
def test_greedy_matches_generate(tiny_model_dirs, references, family, strategy):
    prompts, max_tokens, refs = references
    # 24 blocks x 4 = 96 tokens for 10 requests of up to 60 tokens: continuous must preempt.
    eng = make_engine(tiny_model_dirs[family], strategy=strategy, num_kv_blocks=24, max_model_len=64,
                      max_num_batched_tokens=16)
    outs, events = _run(eng, prompts, max_tokens)
    for i, out in enumerate(outs):
        assert out.output_token_ids == refs[family][i], f"request {i} differs from generate()"
        assert out.finish_reason == "length"
    if strategy == "continuous":
        assert any(ev.preempted for ev in events), "the small pool should force a preemption"
        assert any(e.phase == "prefill" and e.num_tokens < 16 for ev in events for e in ev.entries)
        mixed = [ev for ev in events if {e.phase for e in ev.entries} >= {"prefill", "decode"}]
        assert mixed, "prefill chunks and decodes should share iterations"
    else:
        assert any(e.phase == "padding" for ev in events for e in ev.entries)


@pytest.mark.parametrize("block_size", [1, 7, 16, 256])
def test_block_sizes(tiny_model_dirs, references, block_size):
    prompts, max_tokens, refs = references
    blocks = max(2, 2048 // block_size)
    eng = make_engine(tiny_model_dirs["qwen2"], block_size=block_size, num_kv_blocks=blocks, max_model_len=64,
                      max_num_batched_tokens=24)
    outs, _ = _run(eng, prompts, max_tokens)
    assert [o.output_token_ids for o in outs] == refs["qwen2"]


def test_chunked_prefill_off_matches(tiny_model_dirs, references):
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs["llama"], enable_chunked_prefill=False, max_num_batched_tokens=64,
                      max_model_len=64)
    outs, events = _run(eng, prompts, max_tokens)
    assert [o.output_token_ids for o in outs] == refs["llama"]
    # Whole prompts only: every prefill entry covers a request's full prompt.
    for ev in events:
        for e in ev.entries:
            if e.phase == "prefill":
                assert e.context_len == e.num_tokens


def test_generate_api_in_input_order(tiny_model_dirs, references):
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs["gpt2"], strategy="static")
    outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == refs["gpt2"]
    assert all(o.first_token_s >= o.arrival_s and o.finish_s >= o.first_token_s for o in outs)
    check_drained(eng)


@pytest.mark.parametrize("policy", [p for p in SCHEDULING_POLICIES if p != "fcfs"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_policies_change_order_never_content(tiny_model_dirs, references, strategy, policy):
    prompts, max_tokens, refs = references
    priorities = [(i * 3) % 5 - 2 for i in range(N)]
    tenants = ["flood" if i % 4 else "light" for i in range(N)]
    slos = {"slo_ttft_s": 0.02, "slo_tpot_s": 0.003} if policy == "slo" else {}  # tight: late ones, small budgets
    eng = make_engine(tiny_model_dirs["llama"], strategy=strategy, scheduling_policy=policy, num_kv_blocks=24,
                      max_model_len=64, max_num_batched_tokens=16, max_num_seqs=3, static_batch_size=3, **slos)
    outs, events = _run(eng, prompts, max_tokens, priorities, tenants)
    assert [o.output_token_ids for o in outs] == refs["llama"]
    if policy == "priority":  # the first rows admitted are the best priorities
        first = events[0].admitted if strategy != "continuous" else [
            rid for ev in events for rid in ev.admitted][:3]
        assert sorted(priorities[i] for i in first) == sorted(priorities)[:3]


@pytest.mark.parametrize("family", FAMILIES)
def test_ignore_eos_marks_where_the_answer_would_have_ended(tiny_model_dirs, references, family):
    """Under ignore_eos, the text up to answer_end is exactly what the same request makes without it, and
    the step that sampled the end-of-text token reports it (the views dim what follows). The tiny models'
    end-of-text token is set to one they make, so that both runs reach it."""
    prompts, _, refs = references
    eng = make_engine(tiny_model_dirs[family])
    for i in range(4):
        ref = refs[family][i]
        k = len(ref) // 2
        eng.runner.eos_token_ids = frozenset({ref[k]})  # the model "ends" where it first samples that token
        first = ref.index(ref[k])
        (kept, stopped), events = run_checked(eng, [prompts[i]] * 2, [greedy(len(ref)),
                                                                     greedy(len(ref), ignore_eos=False)])
        assert kept.output_token_ids == ref and stopped.output_token_ids == ref[:first + 1]
        # the same text (a stop flushes bytes of an unfinished character as "\ufffd"; going on keeps them)
        end = kept.answer_end
        assert end is not None and stopped.text.startswith(kept.text[:end])
        assert set(stopped.text[end:]) <= {"\ufffd"}
        assert stopped.answer_end is None
        reported = [ev.answer_ends for ev in events if ev.answer_ends]
        assert reported == [{kept.request_id: kept.answer_end}]
        assert FinishedEvent.of(kept).to_dict()["answer_end"] == kept.answer_end
        assert "answer_end" not in FinishedEvent.of(stopped).to_dict()
        check_event({**events[0].to_dict(), "answer_ends": {"1": 3}})
