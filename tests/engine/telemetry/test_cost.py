"""Cost per million output tokens: the arithmetic, the default price, and the benchmark's field."""
from __future__ import annotations

import json

import pytest

from engine.bench import BenchConfig
from engine.bench.__main__ import main
from engine.bench.report import format_table
from engine.telemetry.cost import DEFAULT_PRICE_PER_HOUR, default_price_per_hour, usd_per_million_tokens


def test_dollars_per_million_tokens():
    # $3.60/h is $0.001/s; at 100 tok/s a million tokens take 10,000 s: $10
    assert usd_per_million_tokens(100.0, 3.6) == pytest.approx(10.0)
    assert usd_per_million_tokens(200.0, 3.6) == pytest.approx(5.0)  # twice the throughput, half the cost
    assert usd_per_million_tokens(100.0, 0.0) == 0.0
    assert usd_per_million_tokens(0.0, 3.6) is None and usd_per_million_tokens(None, 3.6) is None


def test_default_price_from_the_environment():
    assert default_price_per_hour({}) == DEFAULT_PRICE_PER_HOUR
    assert default_price_per_hour({"INFLIGHT_PRICE_PER_HOUR": " 4.5 "}) == 4.5
    for bad in ("cheap", "-1", "nan"):
        with pytest.raises(ValueError, match="INFLIGHT_PRICE_PER_HOUR"):
            default_price_per_hour({"INFLIGHT_PRICE_PER_HOUR": bad})
    for bad in (-0.5, float("inf"), "2", True):
        with pytest.raises(ValueError, match="price per device hour"):
            BenchConfig(price_per_hour=bad)


def test_table_has_a_cost_column():
    rows = [{"lane": "continuous", "output_tokens_per_s": 100.0, "usd_per_million_output_tokens": 10.0}]
    assert "$/M out" in format_table(rows) and "10.00" in format_table(rows)


def test_benchmark_json_carries_the_price_and_the_cost(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "out.json"
    rc = main(["--model", str(tiny_llama_dir), "--device", "cpu", "--dtype", "float32", "--workload", "tiny",
               "--num-requests", "3", "--block-size", "4", "--kv-blocks", "64", "--max-model-len", "128",
               "--warmup", "0", "--no-progress", "--strategies", "continuous", "--price-per-hour", "3.6",
               "--json", str(out)])
    assert rc == 0
    assert "$3.60 per device hour" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["config"]["bench"]["price_per_hour"] == 3.6
    (r,) = data["results"]
    assert r["usd_per_million_output_tokens"] == pytest.approx(1000.0 / r["output_tokens_per_s"])
    assert main(["--price-per-hour", "-1", "--strategies", "continuous"]) == 2
