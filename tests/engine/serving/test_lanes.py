"""engine.serving.lanes: lane specs as text and JSON, their differences from a base config, and labels."""
from __future__ import annotations

import json

import pytest

from engine.config import EngineConfig
from engine.serving.lanes import describe_difference, lane_overrides, load_lanes, parse_lane

BASE = EngineConfig(model="some/model", device="cpu", dtype="auto")


def test_parse_lane_types_and_overrides():
    name, cfg = parse_lane("small blocks:block_size=4,kv_cache_memory_gb=0.5,enable_chunked_prefill=false,"
                           "max_model_len=none,dtype=float32", BASE)
    assert name == "small blocks"
    assert lane_overrides(cfg, BASE) == {"dtype": "float32", "block_size": 4, "kv_cache_memory_gb": 0.5,
                                         "enable_chunked_prefill": False}
    assert cfg.max_model_len is None and cfg.model == "some/model"


def test_bare_strategy_name_and_empty_settings():
    assert parse_lane("static", BASE) == ("static", EngineConfig(model="some/model", device="cpu", dtype="auto",
                                                                  strategy="static"))
    assert parse_lane("same:", BASE) == ("same", BASE)


@pytest.mark.parametrize("text, message", [
    ("a:blok=4", "unknown EngineConfig field 'blok'"),
    ("a:block_size=0", "EngineConfig.block_size"),
    ("a:max_num_seqs=2.5", "EngineConfig.max_num_seqs"),
    ("a:strategy=turbo", "EngineConfig.strategy"),
    ("a:block_size", "'block_size' is not key=value"),
    ("turbo", "lane 'turbo' has no settings"),
    (":block_size=4", "lane name ''"),
    ("x" * 33 + ":block_size=4", "1 to 32 characters"),
    ("a,b:block_size=4", "lane name 'a,b'"),
])
def test_parse_lane_errors_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_lane(text, BASE)


def test_load_lanes_from_json(tmp_path):
    path = tmp_path / "lanes.json"
    path.write_text(json.dumps({"paged 128": {"block_size": 128}, "static": {"strategy": "static"}}))
    lanes = load_lanes(str(path), BASE)
    assert list(lanes) == ["paged 128", "static"]
    assert lanes["paged 128"].block_size == 128 and lanes["static"].strategy == "static"
    path.write_text(json.dumps({"bad": {"block_size": "big"}}))
    with pytest.raises(ValueError, match="lane 'bad'.*block_size"):
        load_lanes(str(path), BASE)
    path.write_text(json.dumps({"bad!": {}}))
    with pytest.raises(ValueError, match="lane name 'bad!'"):
        load_lanes(str(path), BASE)


@pytest.mark.parametrize("overrides, labels", [
    ({}, []),
    ({"block_size": 128}, ["block 128"]),
    ({"enable_chunked_prefill": False}, ["chunked prefill off"]),
    ({"max_num_batched_tokens": 64}, ["budget 64 tok"]),
    ({"max_num_seqs": 4}, ["max batch 4"]),
    ({"strategy": "static"}, ["static"]),
    ({"strategy": "dynamic", "block_size": 32}, ["dynamic", "block 32"]),
    ({"kv_cache_memory_gb": 2}, ["KV 2 GiB"]),
    ({"static_batch_size": 4}, []),  # a continuous lane never reads it: not in its header
    ({"strategy": "static", "static_batch_size": 4, "max_num_seqs": 4}, ["static", "static batch 4"]),
    ({"swap_space_gb": 0.25}, []),  # recompute has no host pool: "host pool 1 GiB" beside swap's misled
    ({"preemption_mode": "swap", "swap_space_gb": 0.25}, ["preempt by swap", "host pool 0.25 GiB"]),
    ({"num_speculative_tokens": 2}, []),  # no drafts: not read
    ({"speculative": "ngram", "num_speculative_tokens": 2}, ["ngram drafts", "up to 2 drafts"]),
])
def test_describe_difference(overrides, labels):
    a = EngineConfig(**{**BASE.__dict__, **overrides})
    assert describe_difference(a, BASE) == labels
