"""Benchmark workloads: seeded generation, distributions, presets, materialization, JSONL traces."""
from __future__ import annotations

import json
import random

import pytest

from engine.bench.workloads import (PRESETS, Lengths, WorkloadSpec, arrival_times, load_prompts, load_trace,
                                    make_workload, materialize, preset, save_trace)


def _key(w):
    return [(r.index, r.arrival_s, r.max_tokens, r.prompt, r.prompt_len) for r in w.requests]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_deterministic_under_a_seed(name):
    a = make_workload(preset(name, scale=0.05 if name == "anyscale" else 1.0))
    b = make_workload(preset(name, scale=0.05 if name == "anyscale" else 1.0))
    assert _key(a) == _key(b)
    c = make_workload(preset(name, scale=0.05 if name == "anyscale" else 1.0, seed=7))
    assert _key(a) != _key(c)


def test_quick_and_anyscale_shapes():
    quick = make_workload(preset("quick"))
    assert len(quick) == 32
    assert all(r.arrival_s == 0 and r.prompt for r in quick.requests)
    assert all(1 <= r.max_tokens <= 128 for r in quick.requests)
    assert len({r.source for r in quick.requests}) == 32  # no prompt repeated
    any_ = make_workload(preset("anyscale", scale=0.1))
    assert len(any_) == 100
    assert all(r.prompt_len == 512 and 1 <= r.max_tokens <= 512 for r in any_.requests)
    assert preset("anyscale", scale=0.1, output_lengths=Lengths.parse("exp:128:32")).output_lengths.cap == 32
    nano = make_workload(preset("nano-vllm"))
    assert len(nano) == 256 and nano.ignore_eos and not nano.chat
    assert all(100 <= r.prompt_len <= 1024 and 100 <= r.max_tokens <= 1024 and r.arrival_s == 0
               for r in nano.requests)


def test_length_distributions():
    rng = random.Random(0)
    assert {Lengths.parse("fixed:9").sample(rng) for _ in range(20)} == {9}
    assert Lengths.parse("9") == Lengths("fixed", value=9)
    u = [Lengths.parse("uniform:3:5").sample(rng) for _ in range(300)]
    assert set(u) == {3, 4, 5}
    e = [Lengths.parse("exp:128:512").sample(rng) for _ in range(4000)]
    assert min(e) >= 1 and max(e) <= 512
    assert 110 < sum(e) / len(e) < 140  # capping at 4x the mean takes off about 2%
    capped = [Lengths.parse("exp:128:32").sample(rng) for _ in range(500)]
    assert max(capped) == 32
    for bad in ("exp:1", "uniform:5:3", "zipf:3", "fixed:0", "x"):
        with pytest.raises(ValueError):
            Lengths.parse(bad)


def test_poisson_arrivals_and_bursts():
    t = arrival_times(2000, 4.0, 1, random.Random(1))
    assert t == sorted(t) and t[0] == 0
    assert 3.6 < len(t) / t[-1] < 4.4
    b = arrival_times(20, 2.0, 5, random.Random(1))
    assert [len(set(b[i:i + 5])) for i in range(0, 20, 5)] == [1, 1, 1, 1]
    assert len(set(b)) == 4
    assert arrival_times(5, None, 1, random.Random(1)) == [0.0] * 5


def test_rate_change_keeps_prompts_and_lengths():
    base = make_workload(preset("quick"))
    online = make_workload(preset("online"))
    assert [(r.prompt, r.max_tokens) for r in base.requests] == [(r.prompt, r.max_tokens) for r in online.requests]
    assert online.requests[-1].arrival_s > 0
    swept = base.with_rate(3.0)
    assert [(r.prompt, r.max_tokens) for r in swept.requests] == [(r.prompt, r.max_tokens) for r in base.requests]
    assert swept.params["rate"] == 3.0 and swept.requests[-1].arrival_s > 0
    assert [r.arrival_s for r in swept.with_rate(None).requests] == [0.0] * len(base)


def test_bundled_prompts_are_varied():
    rows = load_prompts()
    assert len(rows) >= 60
    assert len({r["id"] for r in rows}) == len(rows)
    lengths = sorted(len(r["prompt"]) for r in rows)
    assert lengths[0] < 60 and lengths[-1] > 500  # short questions and long pasted texts
    assert len({r["category"] for r in rows}) >= 8


def test_materialize_and_trace_roundtrip(tiny_llama_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    w = make_workload(WorkloadSpec(name="mix", num_requests=6, prompts="synthetic",
                                   prompt_lengths=Lengths.parse("uniform:3:9"),
                                   output_lengths=Lengths.parse("uniform:1:4"), rate=5.0, seed=3, chat=False))
    m1, m2 = materialize(w, tok), materialize(w, tok)
    assert [r.prompt_token_ids for r in m1.requests] == [r.prompt_token_ids for r in m2.requests]
    special = set(tok.all_special_ids)
    for r in m1.requests:
        assert len(r.prompt_token_ids) == r.prompt_len
        assert not special & set(r.prompt_token_ids)
    path = tmp_path / "trace.jsonl"
    save_trace(m1, path)
    head = json.loads(path.read_text().splitlines()[0])
    assert head["kind"] == "inflight-workload" and head["params"]["seed"] == 3
    back = load_trace(path)
    assert _key(back) == _key(m1)
    assert [r.prompt_token_ids for r in back.requests] == [r.prompt_token_ids for r in m1.requests]
    assert back.ignore_eos and back.params["rate"] == 5.0


def test_materialize_real_prompts_uses_chat_template(tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    w = make_workload(WorkloadSpec(num_requests=2, prompts="real", seed=0))
    m = materialize(w, tok)
    text = tok.decode(m.requests[0].prompt_token_ids)
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="context"):
        materialize(w, tok, max_model_len=8)


def test_bad_traces_are_rejected(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"kind": "something-else"}\n')
    with pytest.raises(ValueError, match="not an Inflight workload trace"):
        load_trace(p)
    p.write_text('{"kind": "inflight-workload", "version": 1}\n{"max_tokens": 3}\n')
    with pytest.raises(ValueError, match="no prompt"):
        load_trace(p)
    with pytest.raises(ValueError, match="unknown workload preset"):
        preset("nope")


def test_hol_flood_and_shared_prefix_shapes():
    hol = make_workload(preset("hol"))
    assert [r.cls for r in hol.requests] == ["long"] * 4 + ["short"] * 28  # the long ones at the head
    assert all(r.arrival_s == 0 and r.tenant is None and r.priority == 0 for r in hol.requests)
    assert all(r.prompt_len == 1024 and r.max_tokens == 256 for r in hol.requests[:4])
    assert all(16 <= r.prompt_len <= 64 and 8 <= r.max_tokens <= 32 for r in hol.requests[4:])
    flood = make_workload(preset("flood"))
    assert [r.tenant for r in flood.requests] == ["flood"] * 64 + ["few"] * 16
    assert flood.has_tenants and not hol.has_tenants and all(r.arrival_s == 0 for r in flood.requests)
    shared = make_workload(preset("shared-prefix"))
    assert len(shared) == 64 and all(r.prefix_len == 512 and 8 <= r.prompt_len <= 32 for r in shared.requests)
    assert all(r.num_prompt_tokens == 512 + r.prompt_len and r.max_tokens <= 16 for r in shared.requests)
    small = make_workload(preset("hol", scale=0.25))
    assert [r.cls for r in small.requests] == ["long"] + ["short"] * 7
    assert small.params["classes"][0] == {"count": 1, "prompt_lengths": "fixed:1024", "output_lengths": "fixed:256",
                                          "cls": "long", "tenant": None, "priority": 0}
    assert "prompt_lengths" not in small.params  # the classes' lengths apply
    with pytest.raises(ValueError, match="cannot be overridden"):
        preset("hol", num_requests=3)
    with pytest.raises(ValueError, match="synthetic"):
        preset("shared-prefix", prompts="real")


def test_shared_prefix_materializes_once_for_everyone(tiny_llama_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    w = make_workload(WorkloadSpec(num_requests=5, prompts="synthetic", prompt_lengths=Lengths.parse("uniform:3:6"),
                                   shared_prefix_len=20, chat=False, seed=2))
    m = materialize(w, tok)
    assert all(r.prompt_token_ids[:20] == m.requests[0].prompt_token_ids[:20] for r in m.requests)
    assert len({tuple(r.prompt_token_ids[20:]) for r in m.requests}) == 5  # unique suffixes
    assert [len(r.prompt_token_ids) for r in m.requests] == [r.num_prompt_tokens for r in w.requests]
    assert not set(tok.all_special_ids) & set(m.requests[0].prompt_token_ids[:20])
    other = materialize(make_workload(WorkloadSpec(num_requests=1, prompts="synthetic", shared_prefix_len=20,
                                                   chat=False, seed=3)), tok)
    assert other.requests[0].prompt_token_ids[:20] != m.requests[0].prompt_token_ids[:20]  # seeded


def test_trace_keeps_labels(tmp_path):
    w = make_workload(preset("flood", scale=0.1, seed=4))
    w.requests[0].priority = -3
    path = tmp_path / "flood.jsonl"
    save_trace(w, path)
    back = load_trace(path)
    fields = lambda w: [(r.tenant, r.cls, r.priority, r.prefix_len, r.prompt_len) for r in w.requests]  # noqa: E731
    assert fields(back) == fields(w) and back.requests[0].priority == -3
    shared = make_workload(preset("shared-prefix", scale=0.05))
    save_trace(shared, path)
    assert [r.num_prompt_tokens for r in load_trace(path).requests] == [r.num_prompt_tokens for r in shared.requests]
