"""A prefix-cache hit never changes outputs: greedy tokens equal Hugging Face generate() on prompts that
share prefixes, with chunked prefill, preemption, aborts and block sizes 1, 7 and 16, and no block lost."""
from __future__ import annotations

import random

import pytest

from engine_helpers import check_drained, check_kv_invariants, greedy, make_engine
from tiny_models import reference_greedy

FAMILY = "qwen2"


def shared_prefix_prompts(seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """A 21-token 'system prompt' shared by most prompts, exact duplicates, a prompt that is another's
    prefix, and one unrelated prompt."""
    rng = random.Random(seed)
    system = [rng.randrange(3, 200) for _ in range(21)]
    prompts = [system + [rng.randrange(3, 200) for _ in range(n)] for n in (1, 4, 9, 15, 2, 30)]
    prompts += [list(prompts[1]), system[:14], list(prompts[3]), [rng.randrange(3, 200) for _ in range(11)]]
    max_tokens = [(i * 5) % 11 + 2 for i in range(len(prompts))]
    return prompts, max_tokens


@pytest.fixture(scope="module")
def references(tiny_model_dirs):
    prompts, max_tokens = shared_prefix_prompts()
    return prompts, max_tokens, reference_greedy(tiny_model_dirs[FAMILY], prompts, max_tokens)


def _run_in_waves(eng, prompts, max_tokens, abort=()):
    """Add the prompts three at a time, a few steps apart, so later ones find earlier ones cached."""
    ids, events = [], []
    for start in range(0, len(prompts), 3):
        for i in range(start, min(start + 3, len(prompts))):
            ids.append(eng.add_request(prompts[i], greedy(max_tokens[i])))
        for _ in range(3):
            events.append(eng.step())
            check_kv_invariants(eng)
            for i in abort:
                if i < len(ids):
                    eng.abort(ids[i])
    eng.draining = True
    while eng.has_unfinished():
        events.append(eng.step())
        check_kv_invariants(eng)
    check_drained(eng)
    return [eng.get_output(i) for i in ids], events


@pytest.mark.parametrize("block_size", [1, 7, 16])
@pytest.mark.parametrize("strategy", ["continuous", "static"])
def test_hits_never_change_outputs(tiny_model_dirs, references, strategy, block_size):
    prompts, max_tokens, refs = references
    # a pool of about 72 tokens (one request needs up to 61): continuous preempts, and evicts cached blocks
    eng = make_engine(tiny_model_dirs[FAMILY], strategy=strategy, enable_prefix_caching=True,
                      block_size=block_size, num_kv_blocks=-(-72 // block_size), max_model_len=64,
                      max_num_batched_tokens=24, static_batch_size=3)
    outs, events = _run_in_waves(eng, prompts, max_tokens)
    for i, out in enumerate(outs):
        assert out.output_token_ids == refs[i], f"request {i} differs from generate()"
    assert sum(ev.prefix_hits for ev in events) > 0, "shared prefixes should hit the cache"
    assert any(e.cached_tokens for ev in events for e in ev.entries)
    if strategy == "continuous":
        assert any(ev.preempted for ev in events), "the small pool should force a preemption"
        assert any(e.phase == "prefill" and 0 < e.num_tokens < 24 and e.context_len > e.num_tokens
                   for ev in events for e in ev.entries), "a chunked prefill should follow a chunk or a hit"


def test_aborted_requests_leave_shared_blocks_to_the_others(tiny_model_dirs, references):
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs[FAMILY], enable_prefix_caching=True, block_size=4, num_kv_blocks=40,
                      max_model_len=64, max_num_batched_tokens=16)
    aborted = {0, 4}
    outs, events = _run_in_waves(eng, prompts, max_tokens, abort=aborted)
    for i, out in enumerate(outs):
        if i in aborted:
            assert out.finish_reason == "abort"
        else:
            assert out.output_token_ids == refs[i], f"request {i} differs from generate()"
    assert any(ev.shared_blocks for ev in events), "requests should have held shared blocks at once"


def test_cached_blocks_outlive_their_request_and_serve_the_next(tiny_model_dirs, references):
    prompts, max_tokens, refs = references
    eng = make_engine(tiny_model_dirs[FAMILY], enable_prefix_caching=True, block_size=4, num_kv_blocks=64,
                      max_model_len=64)
    first = eng.generate([prompts[1]], greedy(max_tokens[1]))[0]
    assert eng.cache.cached_blocks, "the finished request's full blocks stay cached"
    again = eng.generate([prompts[6]], greedy(max_tokens[6]))[0]  # the same prompt as prompts[1]
    assert first.output_token_ids == refs[1] and again.output_token_ids == refs[6]
    # 25 tokens: 6 full blocks, all cached (the last token is computed: it is not in a full block)
    assert again.num_cached_tokens == 24
