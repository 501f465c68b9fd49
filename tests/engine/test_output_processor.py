"""OutputProcessor on its own: a scheduler and the tests' byte-level tokenizer, no model. Whatever the tokens,
a request stops at the first token where a stop applies, and its text is what it streamed up to there."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.detokenizer import detokenizer_for, prepare_detokenizer
from engine.output_processor import OutputProcessor
from engine.outputs import Outputs
from engine.request import Request, SamplingParams
from scheduler_helpers import scheduler
from tiers import examples
from tiny_models import make_byte_tokenizer

EOS = 0
PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def tok():
    t = make_byte_tokenizer()
    prepare_detokenizer(t)
    return t


def new_request(tok, params: SamplingParams) -> Request:
    req = Request(0, PROMPT, params, 0.0, eos_token_ids=frozenset({EOS}))
    req.detok, req.stops = detokenizer_for(tok, PROMPT), params.stop_strings()
    return req


def streamed(tok, tokens: list[int]) -> list[str]:
    """The text a request has after each token, with no stop (a fresh detokenizer's pushes)."""
    detok, text, out = detokenizer_for(tok, PROMPT), "", []
    for t in tokens:
        text += detok.push(t)
        out.append(text)
    return out


def expected(tokens, texts, params: SamplingParams) -> tuple[int, str, str | None]:
    """(tokens kept, finish reason, the stop string that ended it) by the rule read token by token."""
    for n, (t, text) in enumerate(zip(tokens, texts), 1):
        if (t == EOS and not params.ignore_eos) or t in (params.stop_token_ids or ()):
            return n, "stop", None
        hits = [s for s in params.stop_strings() if s in text]
        if hits:
            return n, "stop", min(hits, key=text.find)
        if n == params.max_tokens:
            return n, "length", None
    return len(tokens), None, None


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
def test_a_request_stops_where_the_rule_says_and_keeps_what_it_streamed(tok, data):
    tokens = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), min_size=1, max_size=24))
    texts = streamed(tok, tokens)
    pool = [t for t in texts[-1] if not t.isspace()] + [texts[-1][i:i + 3] for i in range(0, len(texts[-1]), 5)]
    params = SamplingParams(max_tokens=data.draw(st.integers(1, 30)), ignore_eos=data.draw(st.booleans()),
                            stop=data.draw(st.lists(st.sampled_from(pool), max_size=2)) if pool else None,
                            stop_token_ids=data.draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=1)))
    s, output = scheduler(num_blocks=64, block_size=4), OutputProcessor(Outputs())
    req = new_request(tok, params)
    output.outputs.live[0] = req
    s.add(req)
    for tok_id in tokens:
        out = s.schedule()
        output.process(s, out, s.update(out, [tok_id], 0.0), 0.0)
        s.on_step_done()
        if req.is_finished:
            break
    kept, reason, stop = expected(tokens, texts, params)
    assert req.output_token_ids == tokens[:kept] and req.finish_reason == reason
    if stop is not None:  # cut where the stop string begins, nothing flushed after it
        assert req.text == texts[kept - 1][:texts[kept - 1].find(stop)]
    elif reason is not None:
        assert req.text.startswith(texts[kept - 1])  # and what a split character held back, flushed
    if reason is None:
        assert output.news() == [] and 0 in output.outputs.live
    else:
        assert output.news() == [0] and output.news() == [] and output.outputs.get(0).text == req.text
    eos = [i for i, t in enumerate(tokens[:kept]) if t == EOS]
    assert req.answer_end == (len(texts[eos[0]]) if params.ignore_eos and eos else None)


def test_a_failed_forward_ends_its_unfinished_rows_with_the_error(tok):
    s, output = scheduler(num_blocks=64, block_size=4), OutputProcessor(Outputs())
    reqs = [new_request(tok, SamplingParams()) for _ in range(2)]
    for i, r in enumerate(reqs):
        r.request_id = i
        output.outputs.live[i] = r
        s.add(r)
    out = s.schedule()
    output.finish(s, reqs[1], "abort", 0.0)
    output.fail(s, out.rows, RuntimeError("out of memory"), 1.0)
    assert output.news() == [1, 0]
    failed = output.outputs.get(0)
    assert failed.error == "RuntimeError: out of memory" and failed.finish_reason == "error"
    assert output.outputs.get(1).finish_reason == "abort" and not s.running and s.cache.num_free == 64
