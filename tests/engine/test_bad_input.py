"""Bad input gets a clear ValueError, and the engine goes on serving everyone else."""
from __future__ import annotations

import pytest

from engine import EngineConfig, SamplingParams
from engine_helpers import check_drained, greedy, make_engine


@pytest.fixture(scope="module")
def eng(tiny_model_dirs):
    return make_engine(tiny_model_dirs["llama"], num_kv_blocks=40, max_model_len=100)


BAD_REQUESTS = [
    ("", SamplingParams(), "prompt is empty"),
    ([], SamplingParams(), "prompt is empty"),
    ([1, 2, 10**9], SamplingParams(), "outside the vocabulary"),
    (None, SamplingParams(), "prompt must be a string or a list of token ids"),
    ([5] * 90, SamplingParams(max_tokens=20), "max_model_len=100"),
    ([5] * 3, SamplingParams(max_tokens=0), "max_tokens"),
    ([5] * 3, SamplingParams(temperature=-0.5), "temperature"),
    ([5] * 3, SamplingParams(top_p=0.0), "top_p"),
    ([5] * 3, SamplingParams(top_p=1.5), "top_p"),
    ([5] * 3, SamplingParams(top_k=-1), "top_k"),
    ([5] * 3, SamplingParams(stop=42), "stop must be a string"),
    ([5] * 3, SamplingParams(stop=["ok", 3]), "stop must be a string"),
    ([5] * 3, "not params", "SamplingParams"),
]


@pytest.mark.parametrize("prompt,params,message", BAD_REQUESTS)
def test_bad_request_rejected_then_engine_serves(eng, prompt, params, message):
    busy = eng.add_request([7, 8, 9], greedy(6))  # in flight while the bad one arrives
    eng.step()
    with pytest.raises(ValueError, match=message):
        eng.add_request(prompt, params)
    good = eng.add_request([10, 11], greedy(4))
    while eng.has_unfinished():
        eng.step()
    assert eng.get_output(busy).finish_reason == "length"
    assert len(eng.get_output(good).output_token_ids) == 4
    check_drained(eng)


def test_request_larger_than_pool(tiny_model_dirs):
    # The pool holds max_model_len tokens, but a chunking-off engine limits per-request size by its budget.
    eng = make_engine(tiny_model_dirs["llama"], num_kv_blocks=40, max_model_len=100,
                      enable_chunked_prefill=False, max_num_batched_tokens=30)
    with pytest.raises(ValueError, match="max_num_batched_tokens=30"):
        eng.add_request([5] * 25, SamplingParams(max_tokens=10))


def test_pool_too_small_refused_at_start(tiny_model_dirs):
    with pytest.raises(ValueError, match=r"cannot hold one request of max_model_len=100 tokens"):
        make_engine(tiny_model_dirs["llama"], num_kv_blocks=10, block_size=4, max_model_len=100)


def test_max_model_len_beyond_model(tiny_model_dirs):
    with pytest.raises(ValueError, match="exceeds the model's context length"):
        make_engine(tiny_model_dirs["llama"], max_model_len=10**6, num_kv_blocks=10**5)


@pytest.mark.parametrize("field,value", [
    ("strategy", "fastest"), ("block_size", 0), ("num_kv_blocks", -1), ("max_num_seqs", 0),
    ("max_num_batched_tokens", 0), ("static_batch_size", 0), ("static_max_wait_s", -1),
    ("dtype", "float8"), ("device", "tpu"), ("max_model_len", 1), ("enable_chunked_prefill", "yes"),
    ("kv_cache_memory_gb", 0),
])
def test_config_fields_validated(field, value):
    with pytest.raises(ValueError, match=f"EngineConfig.{field}"):
        EngineConfig(**{field: value})


def test_abort_waiting_and_running(eng):
    a = eng.add_request([5] * 10, greedy(20))
    eng.step()
    b = eng.add_request([6] * 10, greedy(20))
    assert eng.abort(b) and eng.abort(a)
    assert not eng.abort(a)  # already finished
    ev = eng.step()
    assert set(ev.finished) == {a, b}
    assert eng.get_output(a).finish_reason == "abort"
    check_drained(eng)
