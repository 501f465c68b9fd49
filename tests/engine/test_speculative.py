"""Speculative decoding (n-gram drafts, verified in the same forward): greedy outputs equal
generate()'s token for token, no KV block is lost, drafts live within the step's budget and the free
blocks, and stops inside an accepted draft end the request exactly where speculation off ends it."""
from __future__ import annotations

import copy
import dataclasses
import random
from collections import Counter

import pytest
import torch

from engine.request import SamplingParams
from engine.scheduler.ngram import propose
from engine_helpers import greedy, make_engine, run_checked
from scheduler_helpers import TOKEN, request, run_fake, scheduler, step
from tiny_models import FAMILIES, make_tiny_model, reference_greedy


def test_ngram_drafts_continue_an_earlier_occurrence_of_the_suffix():
    assert propose([1, 2, 3, 4, 5, 1, 2, 3], 4) == [4, 5, 1, 2]
    assert propose([1, 2, 3, 9, 1, 2, 3, 8, 1, 2, 3], 1) == [8]  # the latest occurrence with k after it
    assert propose([5, 6, 5, 6], 3) == [5, 6]
    assert propose([5, 6, 5], 3) == []  # a single token's match is too weak a guess
    assert propose([1, 2, 3], 2) == [] and propose([7], 3) == [] and propose([1, 1, 1], 0) == []
    rng = random.Random(0)
    for _ in range(300):
        seq = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        k = rng.randrange(1, 9)
        draft = propose(seq, k)
        assert len(draft) <= k
        if draft:  # some suffix of 2-3 tokens occurs earlier, followed by the draft
            assert any(seq[i:i + n] == seq[-n:] and seq[i + n:i + n + len(draft)] == draft
                       for n in (2, 3) for i in range(len(seq) - n))


def repeating_prompts(n: int, vocab: int = 200, seed: int = 1) -> tuple[list[list[int]], list[int]]:
    """Prompts that repeat a short passage (lookup pays), of different lengths and max_tokens."""
    rng = random.Random(seed)
    prompts = []
    for i in range(n):
        passage = [rng.randrange(3, vocab) for _ in range(3 + i % 5)]
        prompts.append((passage * 8)[:6 + 4 * i])
    return prompts, [(i * 5) % 17 + 4 for i in range(n)]


@pytest.fixture(scope="module")
def references(tiny_model_dirs):
    prompts, max_tokens = repeating_prompts(8)
    return prompts, max_tokens, {f: reference_greedy(tiny_model_dirs[f], prompts, max_tokens) for f in FAMILIES}


def oracle_drafts(prompts, refs, seed=0):
    """A drafter that knows generate()'s answer: it drafts the true next tokens, then, at a random
    place, a wrong one, so that verification accepts a prefix and rejects the rest."""
    rng = random.Random(seed)

    def propose_(tokens, k):
        for p, ref in zip(prompts, refs):
            made = len(tokens) - len(p)
            if made >= 0 and tokens[:len(p)] == p and tokens[len(p):] == ref[:made]:
                draft = ref[made:made + k]
                cut = rng.randrange(len(draft) + 1) if draft else 0
                return draft[:cut] + [(t + 1) % 300 for t in draft[cut:cut + 1]]
        return []
    return propose_


CASES = [(s, setting, d) for s in ("continuous", "static", "dynamic") for setting in ("roomy", "tight", "prefix cache")
         for d in ("ngram", "oracle") if s == "continuous" or d == "oracle"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy, setting, drafter", CASES)
def test_greedy_with_drafts_matches_generate(tiny_model_dirs, references, monkeypatch, family, strategy, setting,
                                             drafter):
    prompts, max_tokens, refs = references
    if drafter == "oracle":
        monkeypatch.setattr("engine.scheduler.ngram.propose", oracle_drafts(prompts, refs[family]))
    kw = {"roomy": {}, "prefix cache": {"enable_prefix_caching": True},
          # 20 blocks x 4 for 8 requests of up to 54 tokens: preemption, and drafts cut short by blocks
          "tight": {"num_kv_blocks": 20, "max_model_len": 64, "max_num_batched_tokens": 12}}[setting]
    eng = make_engine(tiny_model_dirs[family], strategy=strategy, speculative="ngram", num_speculative_tokens=5, **kw)
    outs, events = run_checked(eng, prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == refs[family]
    entries = [e for ev in events for e in ev.entries]
    if drafter == "oracle":  # drafted, accepted in part, and rejected in part (the tiny random models
        # rarely repeat themselves: the real drafter's guesses here are few, and mostly wrong)
        assert any(0 < e.accepted < e.drafted for e in entries) and any(e.accepted == 0 < e.drafted for e in entries)
    for ev in events:
        assert strategy != "continuous" or ev.tokens_used <= eng.cfg.max_num_batched_tokens
        for e in ev.entries:
            assert 0 <= e.accepted <= e.drafted <= 5 and (e.drafted == 0 or e.phase == "decode")
            assert e.num_tokens == 1 + e.drafted or e.drafted == 0
    if setting == "tight" and strategy == "continuous":
        assert any(ev.preempted for ev in events)


DRAFT_CASES = [(s, setting, f) for s in ("continuous", "static", "dynamic")
               for setting in ("roomy", "tight", "prefix cache")
               for f in FAMILIES if s == "continuous" or f == "llama"]


@pytest.mark.parametrize("strategy, setting, family", DRAFT_CASES)
def test_draft_model_greedy_matches_generate(tiny_model_dirs, tiny_draft_dirs, references, family, strategy,
                                             setting):
    """speculative = "draft": outputs equal generate()'s with a draft model that agrees in part (its own
    paged KV kept beside the target's through chunked prefill, preemption and the prefix cache); with the
    target as its own draft, every draft is accepted, which holds only if the draft model's K/V of every
    position it reads is right."""
    prompts, max_tokens, refs = references
    kw = {"roomy": {}, "prefix cache": {"enable_prefix_caching": True},
          "tight": {"num_kv_blocks": 20, "max_model_len": 64, "max_num_batched_tokens": 12}}[setting]
    # the model as its own draft where the KV moves most: preemption and the prefix cache
    for draft in (tiny_draft_dirs[family],) + ((tiny_model_dirs[family],) if setting != "roomy" else ()):
        eng = make_engine(tiny_model_dirs[family], strategy=strategy, speculative="draft",
                          speculative_model=str(draft), num_speculative_tokens=5, **kw)
        outs, events = run_checked(eng, prompts, [greedy(m) for m in max_tokens])
        assert [o.output_token_ids for o in outs] == refs[family]
        entries = [e for ev in events for e in ev.entries if e.drafted]
        assert entries and all(e.phase == "decode" and e.num_tokens == 1 + e.drafted for e in entries)
        accepted, drafted = sum(e.accepted for e in entries), sum(e.drafted for e in entries)
        if draft == tiny_model_dirs[family]:
            assert accepted == drafted
        else:
            assert 0 < accepted < drafted
        if setting == "tight" and strategy == "continuous":
            assert any(ev.preempted for ev in events)


def test_a_draft_model_of_another_shape_drafts_from_its_own_pool(tiny_model_dirs):
    """A draft of another family (gpt2: 2 layers of 4 KV heads) for a qwen2 target (3 layers, 2 KV
    heads): its pool has the target's blocks in its own shape; outputs equal generate()'s."""
    prompts, max_tokens = repeating_prompts(6, seed=2)
    eng = make_engine(tiny_model_dirs["qwen2"], speculative="draft", speculative_model=str(tiny_model_dirs["gpt2"]))
    target, draft = eng.runner.pool, eng.drafter.runner.pool
    assert draft.num_blocks == target.num_blocks and draft.block_size == target.block_size
    assert eng.drafter.kv_shape != eng.runner.kv_shape
    outs, events = run_checked(eng, prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["qwen2"], prompts, max_tokens)
    assert sum(e.drafted for ev in events for e in ev.entries) > 0


def test_a_draft_model_that_cannot_serve_the_target_is_refused(tiny_model_dirs, tmp_path):
    """Another tokenizer, or fewer positions than max_model_len: a clear error naming the setting."""
    import json
    import shutil
    other = shutil.copytree(tiny_model_dirs["llama"], tmp_path / "other")
    spec = json.loads((other / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped: the same words, other numbers
    (other / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="EngineConfig.speculative_model: .* does not share the tokenizer"):
        make_engine(tiny_model_dirs["llama"], speculative="draft", speculative_model=str(other))
    short = make_tiny_model("llama", tmp_path / "short", max_position_embeddings=64)
    with pytest.raises(ValueError, match="EngineConfig.speculative_model: .* reads at most 64 positions, fewer "
                                         "than max_model_len=128"):
        make_engine(tiny_model_dirs["llama"], speculative="draft", speculative_model=str(short), max_model_len=128)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_stops_inside_an_accepted_draft_end_where_they_would_without_one(tiny_model_dirs, monkeypatch, family):
    """EOS, stop token ids, stop strings and max_tokens met in the middle of a step's accepted drafts
    (the oracle drafter drafts the true tokens): the same tokens, text and finish reason as with
    speculation off."""
    prompts, _ = repeating_prompts(8, seed=3)
    plain, _ = run_checked(make_engine(tiny_model_dirs[family]), prompts, [greedy(24) for _ in prompts])
    eos = plain[3].output_token_ids[9]
    params = []
    for i, out in enumerate(plain):  # each stops at something its plain run makes mid-way
        kind = i % 4
        params.append(greedy(24, stop_token_ids=[out.output_token_ids[5 + i]]) if kind == 0 else
                      greedy(7 + i) if kind == 1 else
                      greedy(24, stop=[out.text[len(out.text) // 2:][:2]]) if kind == 2 and out.text.strip() else
                      SamplingParams(max_tokens=24))  # kind 3: stops at the EOS below
    outs = {}
    for spec in ("off", "ngram"):
        monkeypatch.setattr("engine.scheduler.ngram.propose",
                            oracle_drafts(prompts, [o.output_token_ids for o in plain], seed=5))
        eng = make_engine(tiny_model_dirs[family], speculative=spec, num_speculative_tokens=8)
        eng.runner.eos_token_ids = frozenset({eos})
        outs[spec], events = run_checked(eng, prompts, params)
    assert any(e.accepted >= 2 for ev in events for e in ev.entries)
    # accepted counts only drafts that became output: each step's own token plus them is every token made
    made = sum(len(ev.sampled) + sum(e.accepted for e in ev.entries) for ev in events)
    assert made == sum(len(o.output_token_ids) for o in outs["ngram"])
    assert {o.finish_reason for o in outs["off"]} == {"stop", "length"}
    for a, b in zip(outs["off"], outs["ngram"]):
        assert (a.output_token_ids, a.text, a.finish_reason) == (b.output_token_ids, b.text, b.finish_reason)


def test_drafts_count_against_the_token_budget():
    # the fake runner samples TOKEN everywhere: once a request repeats it, every draft is accepted
    s = scheduler(num_blocks=64, max_num_batched_tokens=10, speculative="ngram", num_speculative_tokens=4)
    for rid in range(3):
        s.add(request(rid, prompt_len=2, max_tokens=30))
    outs = [step(s) for _ in range(8)]
    assert all(out.num_tokens <= 10 for out in outs)
    drafting = [r for out in outs for r in out.rows if r.draft]
    assert drafting and all(r.draft == [TOKEN] * len(r.draft) and r.accepted == len(r.draft) for r in drafting)
    assert max(len(r.draft) for r in drafting) == 4


@pytest.mark.parametrize("strategy", ["continuous", "static", "dynamic"])
@pytest.mark.parametrize("seed", range(4))
def test_drafts_change_no_scheduling_decision(seed, strategy):
    """From any state, the same rows, admissions, preemptions and waits as with speculation off: drafts
    only take what budget and blocks are left, so they never preempt or delay anyone (a small pool and
    budget, requests arriving at random)."""
    rng = random.Random(seed)
    s = scheduler(strategy, num_blocks=rng.choice([8, 12, 20]), max_num_batched_tokens=rng.choice([6, 12, 32]),
                  max_num_seqs=rng.choice([2, 4]), speculative="ngram", num_speculative_tokens=rng.randrange(1, 9))
    rid = 0
    for _ in range(60):
        if rng.random() < 0.3:
            s.add(request(rid, prompt_len=rng.randrange(1, 12), max_tokens=rng.randrange(1, 16)))
            rid += 1
        twin = copy.deepcopy(s)
        twin.cfg = dataclasses.replace(s.cfg, speculative="off")
        plain, spec = twin.schedule(), s.schedule()
        assert [(r.request.request_id, r.phase, r.num_new - len(r.draft)) for r in spec.rows] == \
            [(r.request.request_id, r.phase, r.num_new) for r in plain.rows]
        assert (spec.admitted, spec.preempted, spec.waits) == (plain.admitted, plain.preempted, plain.waits)
        run_fake(s, spec)
    assert rid and s.cache.num_free + sum(len(t) for t in s.cache.block_tables.values()) == s.cache.num_blocks


def test_drafts_stop_at_max_tokens():
    """A row never drafts past the tokens it may still make: it ends with exactly max_tokens."""
    s = scheduler(speculative="ngram", num_speculative_tokens=8)
    req = request(0, prompt_len=2, max_tokens=6)
    s.add(req)
    steps = 0
    while s.has_work():
        made = len(req.output_token_ids)
        for r in step(s).rows:
            assert made + 1 + len(r.draft) <= 6
        steps += 1
    assert req.output_token_ids == [TOKEN] * 6 and steps < 6  # a prefill, then drafts took several at once


@pytest.mark.parametrize("bad, field", [({"speculative": "lookahead"}, "speculative"),
                                        ({"speculative": "draft"}, "speculative_model"),
                                        ({"speculative": "draft", "speculative_model": " "}, "speculative_model"),
                                        ({"speculative": "ngram", "speculative_model": "m"}, "speculative_model"),
                                        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
                                        ({"num_speculative_tokens": 9}, "num_speculative_tokens"),
                                        ({"num_speculative_tokens": True}, "num_speculative_tokens")])
def test_bad_settings_name_the_field(bad, field):
    from engine.config import EngineConfig
    with pytest.raises(ValueError, match=f"EngineConfig.{field} must be"):
        EngineConfig(model="m", **bad)


def test_sampled_rows_draft_too():
    s = scheduler(speculative="ngram", num_speculative_tokens=4)
    req = request(0, prompt_len=2, max_tokens=12)
    req.params.temperature = 0.7
    s.add(req)
    assert [r for _ in range(8) for r in step(s).rows if r.draft]


# ---- temperature > 0: rejection sampling keeps the model's distribution ---------------------------
PROMPT = [11, 12, 13, 14, 15, 16]
SAMPLED = dict(temperature=0.7, top_k=12)
ALPHA = 0.001  # significance of each chi-square test below (the seeds are fixed: the outcome is too)


def chi2_p(observed: dict, expected: dict, n: int) -> float:
    """Pearson's chi-square p-value of counts against probabilities; bins expecting < 5 pooled."""
    keys = set(observed) | set(expected)
    small = [k for k in keys if n * expected.get(k, 0.0) < 5]
    bins = [([k], n * expected.get(k, 0.0)) for k in keys if k not in small] + [(small, n * sum(
        expected.get(k, 0.0) for k in small))]
    bins = [(ks, e) for ks, e in bins if ks]
    stat = sum((sum(observed.get(k, 0) for k in ks) - e) ** 2 / e for ks, e in bins if e > 0)
    assert all(e > 0 or sum(observed.get(k, 0) for k in ks) == 0 for ks, e in bins), "a token that cannot occur"
    dof = len(bins) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(stat / 2)))


def chi2_two_samples_p(a: dict, b: dict) -> float:
    """Pearson's chi-square p-value that two samples of equal size come from one distribution (counts by
    token; bins of fewer than 10 in both pooled)."""
    keys = set(a) | set(b)
    small = [k for k in keys if a.get(k, 0) + b.get(k, 0) < 10]
    bins = [[k] for k in keys if k not in small] + ([small] if small else [])
    pairs = [(sum(a.get(k, 0) for k in ks), sum(b.get(k, 0) for k in ks)) for ks in bins]
    stat = sum((x - y) ** 2 / (x + y) for x, y in pairs if x + y)
    dof = len(pairs) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(stat / 2)))


def exact_second_token(model_dir) -> tuple[dict, int]:
    """The model's own distribution of the second output token after PROMPT (the first one summed out),
    under SAMPLED's temperature and top-k; and the likeliest second token."""
    from engine.model.sampler import _probabilities
    from tiny_models import _load_reference
    model, params = _load_reference(model_dir), SamplingParams(**SAMPLED)
    with torch.no_grad():
        p1 = _probabilities(model(torch.tensor([PROMPT])).logits[:, -1], [params])[0]
        firsts = [t for t in range(p1.shape[0]) if p1[t] > 0]
        logits = model(torch.tensor([PROMPT + [t] for t in firsts])).logits[:, -1]
        p2 = (p1[firsts, None] * _probabilities(logits, [params] * len(firsts))).sum(0)
    dist = {t: float(p2[t]) for t in range(p2.shape[0]) if p2[t] > 0}
    return dist, max(dist, key=dist.get)


def sample_outputs(model_dir, n: int, **spec) -> tuple[list[list[int]], list]:
    """n seeded requests of 3 tokens after PROMPT, with `spec`'s speculative decoding settings; (outputs,
    step events)."""
    eng = make_engine(model_dir, num_speculative_tokens=2, max_num_seqs=128, num_kv_blocks=1024,
                      max_num_batched_tokens=1024, **spec)
    outs, events = run_checked(eng, [PROMPT] * n, [SamplingParams(max_tokens=3, seed=i, **SAMPLED) for i in range(n)])
    return [o.output_token_ids for o in outs], events


@pytest.fixture(scope="module")
def plain_samples(tiny_model_dirs):
    return sample_outputs(tiny_model_dirs["llama"], 3000)[0]


@pytest.mark.parametrize("drafter", ["ngram", "draft model"])
def test_rejection_sampling_keeps_the_distribution(tiny_model_dirs, tiny_draft_dirs, plain_samples, monkeypatch,
                                                   drafter):
    """Next-token frequencies with drafts agree with the model's exact distribution (the second token)
    and with sampling without drafts (the third, two samples), by chi-square at ALPHA over 3,000 samples each; the
    drafts are accepted at some positions and rejected at others. The n-gram drafter is made to draft
    the likeliest second token twice; the draft model drafts its own greedy picks."""
    model_dir, plain = tiny_model_dirs["llama"], plain_samples
    n = len(plain)
    exact, likely = exact_second_token(model_dir)
    if drafter == "ngram":
        monkeypatch.setattr("engine.scheduler.ngram.propose", lambda tokens, k: [likely, likely][:k])
        spec, events = sample_outputs(model_dir, n, speculative="ngram")
    else:
        spec, events = sample_outputs(model_dir, n, speculative="draft",
                                      speculative_model=str(tiny_draft_dirs["llama"]))
    assert chi2_p(Counter(o[1] for o in spec), exact, n) > ALPHA
    assert chi2_p(Counter(o[1] for o in plain), exact, n) > ALPHA  # the test itself holds without drafts
    # (two samples: the frequencies without drafts are no exact distribution to hold the others to)
    assert chi2_two_samples_p(Counter(o[2] for o in spec), Counter(o[2] for o in plain)) > ALPHA
    entries = [e for ev in events for e in ev.entries if e.drafted]
    kept, drafted = sum(e.accepted for e in entries), sum(e.drafted for e in entries)
    assert 0.05 * drafted < kept < 0.95 * drafted  # both paths taken: drafts accepted and rejected
