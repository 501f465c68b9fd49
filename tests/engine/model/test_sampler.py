"""engine.model.sampler: greedy, temperature, top-k, top-p, per-request seeds."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from engine.model import sampler
from engine.model.sampler import greedy_tokens, make_generator, sample
from tiers import examples
from engine.request import SamplingParams

V = 50


def _logits(n: int, vocab: int = V, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, vocab, generator=g) * 3).to(dtype)


def _sp(**kw) -> SamplingParams:
    p = SamplingParams(**kw)
    p.validate()
    return p


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_greedy_is_argmax(dtype):
    logits = _logits(7, dtype=dtype)
    out = sample(logits, [_sp()] * 7, [None] * 7)
    assert out.dtype == torch.long and out.shape == (7,) and out.device == logits.device
    assert torch.equal(out, logits.float().argmax(-1))


@settings(max_examples=examples(200), deadline=None)
@given(rows=st.integers(0, 9), vocab=st.integers(1, 70), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]), strided=st.booleans())
def test_greedy_tokens_are_torch_argmax_ties_nan_and_inf_included(rows, vocab, seed, dtype, strided):
    """The CPU's NumPy argmax picks what torch.argmax (generate()'s) picks: the first of equal largest values,
    a NaN as the largest, infinities, rows all -inf; also of a view that skips columns (a draft model's)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 4, (rows, vocab + 1), generator=g).float()  # (few values: many ties)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf")])
    mask = torch.rand(rows, vocab + 1, generator=g) < 0.1
    logits[mask] = specials[torch.randint(0, 3, (int(mask.sum()),), generator=g)]
    logits = logits.to(dtype)
    logits = logits[:, 1:] if strided else logits[:, :vocab]
    got = greedy_tokens(logits)
    assert got.dtype == torch.long and got.tolist() == logits.argmax(dim=-1).tolist()


def test_greedy_tokens_of_logits_that_require_grad():
    """Outside the engine's inference mode (a caller of sample, the tests): the same tokens, no error."""
    logits = torch.randn(4, 30, requires_grad=True)
    assert greedy_tokens(logits).tolist() == logits.argmax(-1).tolist()


@pytest.mark.parametrize("r", [0.0, 1.0 - 2.0 ** -24])
def test_a_draw_at_either_end_of_its_uniform_takes_a_token_that_has_probability(monkeypatch, r):
    """The inverse CDF's edges: u = 1 takes the last token with probability, not a zero one after it; a u near
    0 takes the first with probability, not a zero one before it; a row of zeros (NaN logits) takes its first."""
    probs = torch.tensor([[0, 0, .5, 0, .5, 0], [.2, 0, 0, 0, 0, .8], [0, 0, 0, 0, 0, 1.0], [0.0] * 6])
    rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *size, **kw: torch.full_like(rand(*size, **kw), r))
    tokens = sampler._draw(probs, [None, make_generator(3, "cpu"), None, None]).tolist()
    assert all(probs[i, t] > 0 for i, t in enumerate(tokens[:3])), tokens
    assert tokens == ([4, 5, 5, 0] if r == 0.0 else [2, 0, 5, 0])


def test_empty_batch():
    out = sample(torch.empty(0, V), [], [])
    assert out.shape == (0,) and out.dtype == torch.long


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError):
        sample(_logits(2), [_sp()], [None, None])


@pytest.mark.parametrize("temperature", [0.3, 1.0, 7.0, 100.0])
def test_top_k_one_is_greedy(temperature):
    logits = _logits(16, seed=1)
    params = [_sp(temperature=temperature, top_k=1)] * 16
    for _ in range(3):
        assert torch.equal(sample(logits, params, [None] * 16), logits.argmax(-1))


@pytest.mark.parametrize("temperature", [0.5, 1.0, 50.0])
def test_tiny_top_p_is_greedy(temperature):
    logits = _logits(16, seed=2)
    params = [_sp(temperature=temperature, top_p=1e-6)] * 16
    gens = [make_generator(i, "cpu") if i % 2 else None for i in range(16)]
    assert torch.equal(sample(logits, params, gens), logits.argmax(-1))


def test_mixed_batch_greedy_rows_take_argmax():
    logits = _logits(10, seed=3)
    params = [_sp() if i % 3 == 0 else _sp(temperature=1.0, top_k=3) for i in range(10)]
    gens = [make_generator(i, "cpu") if i % 2 else None for i in range(10)]
    out = sample(logits, params, gens)
    greedy = [i for i in range(10) if i % 3 == 0]
    assert torch.equal(out[greedy], logits.argmax(-1)[greedy])
    top3 = logits.topk(3, dim=-1).indices
    for i in range(10):
        assert out[i].item() in top3[i].tolist()


def test_sampled_tokens_inside_top_k():
    n, k = 400, 5
    logits = _logits(n, seed=4)
    params = [_sp(temperature=3.0, top_k=k)] * n
    torch.manual_seed(0)
    out = sample(logits, params, [None] * n)
    allowed = logits.topk(k, dim=-1).indices
    assert (allowed == out.unsqueeze(1)).any(dim=1).all()
    assert len(set(out.tolist())) > k  # it did sample, not just take argmax


@pytest.mark.parametrize("with_unfiltered_row", [False, True])
def test_per_row_top_k_in_one_batch(with_unfiltered_row):
    # Rows with different top_k share a batch (and, with a top_k=0 row, the
    # full-sort path); each row must keep exactly its own top-k.
    ks = [1, 2, 3, 7] + ([0] if with_unfiltered_row else [])
    reps = 150
    row = _logits(1, seed=10)[0]
    logits = row.expand(len(ks) * reps, V)
    params = [_sp(temperature=50.0, top_k=k) for k in ks] * reps
    torch.manual_seed(3)
    out = sample(logits, params, [None] * len(params)).view(reps, len(ks))
    order = row.argsort(descending=True).tolist()
    for j, k in enumerate(ks):
        seen = set(out[:, j].tolist())
        if k:
            assert seen == set(order[:k]), (k, seen)
        else:
            assert len(seen) > 7


def test_sampled_tokens_inside_top_p_nucleus():
    n, top_p = 300, 0.6
    logits = _logits(n, seed=5)
    torch.manual_seed(1)
    out = sample(logits, [_sp(temperature=1.0, top_p=top_p)] * n, [None] * n)
    probs = logits.softmax(-1)
    for i in range(n):
        p_tok = probs[i, out[i]].item()
        # Mass of the tokens strictly more likely than the chosen one is below top_p.
        assert probs[i][probs[i] > p_tok].sum().item() < top_p + 1e-6


def test_seeded_row_reproducible_and_batch_independent():
    steps = 12
    step_logits = [_logits(1, seed=100 + s)[0] for s in range(steps)]
    params = _sp(temperature=1.3, top_k=20, top_p=0.95, seed=1234)

    def run(position: int, batch: int, others_seeded: bool) -> list[int]:
        gen = make_generator(params.seed, "cpu")
        other_gens = [make_generator(77 + j, "cpu") if others_seeded else None for j in range(batch)]
        toks = []
        for s in range(steps):
            torch.manual_seed(s * 31 + batch)  # disturb the default generator
            rows = list(_logits(batch, seed=500 + s))
            rows.insert(position, step_logits[s])
            ps = [_sp(temperature=0.8 + 0.1 * j) if j % 2 else _sp() for j in range(batch)]
            ps.insert(position, params)
            gs = list(other_gens)
            gs.insert(position, gen)
            toks.append(sample(torch.stack(rows), ps, gs)[position].item())
        return toks

    alone = run(0, 0, False)
    assert run(0, 0, False) == alone
    assert run(2, 5, False) == alone
    assert run(5, 5, True) == alone
    assert run(0, 9, True) == alone
    # A different seed gives a different sequence (overwhelmingly likely).
    gen = make_generator(99, "cpu")
    other = [sample(step_logits[s].unsqueeze(0), [params], [gen]).item() for s in range(steps)]
    assert other != alone


def test_unseeded_rows_follow_default_generator():
    logits = _logits(8, seed=6)
    params = [_sp(temperature=1.0)] * 8
    torch.manual_seed(42)
    a = sample(logits, params, [None] * 8)
    torch.manual_seed(42)
    b = sample(logits, params, [None] * 8)
    assert torch.equal(a, b)


def test_make_generator():
    assert make_generator(None, "cpu") is None
    g1, g2 = make_generator(7, "cpu"), make_generator(7, torch.device("cpu"))
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


def _expected_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> list[float]:
    """Reference filter written independently, in float64 on plain lists."""
    z = [x / temperature for x in logits.double().tolist()]
    order = sorted(range(len(z)), key=lambda i: -z[i])
    keep = order[:top_k] if top_k else order
    m = max(z[i] for i in keep)
    w = {i: math.exp(z[i] - m) for i in keep}
    total = sum(w.values())
    nucleus, mass = [], 0.0
    for i in keep:
        if mass >= top_p:
            break
        nucleus.append(i)
        mass += w[i] / total
    total = sum(w[i] for i in nucleus)
    return [w[i] / total if i in nucleus else 0.0 for i in range(len(z))]


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0),
    (0.7, 0, 1.0),
    (2.0, 4, 1.0),
    (1.0, 0, 0.8),
    (1.5, 6, 0.9),
])
def test_distribution_matches_softmax(temperature, top_k, top_p):
    vocab, n = 8, 20000
    row = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
    expected = _expected_probs(row, temperature, top_k, top_p)
    params = [_sp(temperature=temperature, top_k=top_k, top_p=top_p)] * n
    torch.manual_seed(1234)
    out = sample(row.expand(n, vocab), params, [None] * n)
    counts = torch.bincount(out, minlength=vocab).tolist()
    chi2 = 0.0
    for c, p in zip(counts, expected):
        if p == 0:
            assert c == 0
        else:
            chi2 += (c - n * p) ** 2 / (n * p)
    # df <= 7; 0.1% critical value is ~24.3. Loose on purpose.
    assert chi2 < 30, (counts, [round(n * p) for p in expected])


def test_seeded_rows_distribution():
    # Seeded draws follow the same distribution as unseeded ones.
    row = torch.tensor([1.0, 0.0, -1.0, 0.5])
    expected = row.softmax(-1).tolist()
    gen = make_generator(5, "cpu")
    p = _sp(temperature=1.0, seed=5)
    n = 3000
    toks = [sample(row.unsqueeze(0), [p], [gen]).item() for _ in range(n)]
    counts = [toks.count(i) for i in range(4)]
    chi2 = sum((c - n * q) ** 2 / (n * q) for c, q in zip(counts, expected))
    assert chi2 < 25, counts


def test_bad_logits_do_not_crash():
    logits = _logits(3, seed=7)
    logits[1] = float("nan")
    logits[2] = float("-inf")
    out = sample(logits, [_sp(temperature=1.0)] * 3, [None] * 3)
    assert out.shape == (3,) and ((out >= 0) & (out < V)).all()


def test_partial_inf_logits_never_sampled():
    logits = _logits(64, seed=8)
    logits[:, 10:] = float("-inf")
    out = sample(logits, [_sp(temperature=2.0, top_p=0.99)] * 64, [None] * 64)
    assert (out < 10).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_and_stays_on_device():
    logits = _logits(6, seed=9).cuda()
    params = [_sp(), _sp(temperature=1.0, top_k=1), _sp(temperature=0.9, seed=3),
              _sp(temperature=1.0, top_p=0.5), _sp(), _sp(temperature=2.0, seed=4)]
    gens = [make_generator(p.seed, logits.device) for p in params]
    out = sample(logits, params, gens)
    assert out.device == logits.device and out.dtype == torch.long
    assert out[0].item() == logits[0].argmax().item()
    assert out[1].item() == logits[1].argmax().item()
    # Same seed, same logits, same token.
    again = sample(logits, params, [make_generator(p.seed, logits.device) for p in params])
    assert out[2].item() == again[2].item() and out[5].item() == again[5].item()
    # bf16 logits.
    out16 = sample(logits.bfloat16(), [_sp()] * 6, [None] * 6)
    assert torch.equal(out16, logits.bfloat16().float().argmax(-1))


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 2**16), vocab=st.integers(2, 120), candidates=st.integers(1, 24),
       rows=st.lists(st.tuples(st.sampled_from([0.3, 0.7, 1.0, 1.6]), st.sampled_from([0, 0, 1, 3, 9, 40]),
                               st.sampled_from([1.0, 1.0, 0.05, 0.5, 0.9, 0.99]), st.floats(0.2, 12.0)),
                     min_size=1, max_size=6))
def test_top_k_and_top_p_keep_what_an_exact_filter_keeps_whichever_candidates_are_looked_at(
        seed, vocab, candidates, rows):
    """Each sampled row's probabilities equal the float64 reference's (_expected_probs), in a batch of rows with
    and without top-k and top-p, peaked and flat (`scale`), where the candidates looked at first hold every
    nucleus and where one goes on past them (then the whole vocabulary is sorted)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.stack([torch.randn(vocab, generator=g) * scale for *_, scale in rows])
    params = [_sp(temperature=t, top_k=k, top_p=p) for t, k, p, _ in rows]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sampler, "NUCLEUS_CANDIDATES", candidates)
        got = sampler._probabilities(logits, params)
    for row, (t, k, p, _) in zip(range(len(rows)), rows):
        z = logits[row].double() / t
        kept = z.sort(descending=True).values[:k or vocab]
        mass = (kept - kept.logsumexp(0)).exp().cumsum(0)
        if p < 1 and ((mass - p).abs() < 1e-4).any():
            continue  # (a nucleus that ends within float32's rounding of top_p: either answer is right)
        want = torch.tensor(_expected_probs(logits[row], t, k if k < vocab else 0, p), dtype=torch.float64)
        assert torch.allclose(got[row].double(), want, atol=1e-5), (row, t, k, p)


@pytest.mark.parametrize("top_ks", [(5, 7), (5, 0), (0, 0)])
def test_top_k_and_top_p_never_read_a_devices_values_back(top_ks):
    """On a device (a meta tensor here: reading one back raises) the filter waits for nothing: the check of
    whether a nucleus goes on past the candidates is the CPU's alone."""
    logits = torch.empty(2, V, device="meta")
    params = [_sp(temperature=1.0, top_k=k, top_p=p) for k, p in zip(top_ks, (0.9, 0.5))]
    assert sampler._probabilities(logits, params).shape == (2, V)
