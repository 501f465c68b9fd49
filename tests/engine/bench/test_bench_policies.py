"""The benchmark on labelled workloads (tiny model): tenants and priorities reach the engine, and policy
and prefix-cache lanes compare in one run with per-class, per-tenant and prefix metrics."""
from __future__ import annotations

import json

from engine.bench import BenchConfig, run_benchmark
from engine.bench.__main__ import main
from engine.bench.workloads import Lengths, RequestClass, WorkloadSpec, make_workload, save_trace
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine


def _mixed(**kw) -> WorkloadSpec:
    short = dict(prompt_lengths=Lengths.parse("uniform:2:6"), output_lengths=Lengths.parse("uniform:1:3"))
    return WorkloadSpec("mixed", prompts="synthetic", chat=False, seed=1, classes=(
        RequestClass(2, Lengths.parse("12"), Lengths.parse("8"), cls="long", tenant="a", priority=2),
        RequestClass(4, cls="short", tenant="b", **short)), **kw)


def test_priority_and_tenant_reach_the_engine(tiny_llama_dir, monkeypatch):
    seen = []
    add = LLMEngine.add_request

    def spy(self, prompt, params, **kw):
        seen.append((kw.get("priority"), kw.get("tenant")))
        return add(self, prompt, params, **kw)

    monkeypatch.setattr(LLMEngine, "add_request", spy)
    base = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=4, num_kv_blocks=64,
                        max_model_len=128, max_num_seqs=2, scheduling_policy="fair")
    res = run_benchmark(make_workload(_mixed()), "continuous", BenchConfig(engine=base, warmup_requests=0))
    assert seen == [(2, "a")] * 2 + [(0, "b")] * 4
    r = res.results[0]
    assert r["completed"] == 6 and r["info"]["policy"] == "fair"
    assert r["classes"]["long"]["requests"] == 2 and r["classes"]["short"]["queue_wait_max_s"] >= 0
    assert sum(t["tokens_served"] for t in r["tenants"].values()) == r["prompt_tokens"] + r["output_tokens"] - 6
    assert 0.5 <= r["jain_index"] <= 1.0 and r["backlogged_s"] > 0


def test_policy_and_prefix_lanes_in_one_run(tiny_llama_dir, tmp_path, capsys):
    trace, out = tmp_path / "mixed.jsonl", tmp_path / "out.json"
    save_trace(make_workload(_mixed(shared_prefix_len=16)), trace)
    rc = main(["--model", str(tiny_llama_dir), "--device", "cpu", "--dtype", "float32", "--workload", str(trace),
               "--block-size", "4", "--kv-blocks", "64", "--max-model-len", "128", "--max-num-seqs", "2",
               "--warmup", "1", "--no-progress", "--json", str(out),
               "--lanes", "fcfs:scheduling_policy=fcfs", "--lanes", "fair:scheduling_policy=fair",
               "--lanes", "cached:scheduling_policy=fair,enable_prefix_caching=true"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "prefill tok" in printed and "per class" in printed and "Jain" in printed
    by = {r["lane"]: r for r in json.loads(out.read_text())["results"]}
    assert by["fair"]["info"]["policy"] == "fair" and by["cached"]["info"]["prefix_caching"]
    assert by["fcfs"]["prefix_hit_rate"] is None and by["cached"]["prefix_hit_rate"] > 0
    assert by["cached"]["prefill_tokens"] < by["fair"]["prefill_tokens"] == by["fcfs"]["prefill_tokens"]
    assert all(r["completed"] == 6 and r["output_tokens"] == by["fcfs"]["output_tokens"] for r in by.values())


def test_each_run_of_a_caching_lane_starts_cold(tiny_llama_dir):
    """Two identical runs of a prefix-caching lane hit equally: nothing cached by the warm-up or the
    first run serves the second."""
    base = EngineConfig(model=str(tiny_llama_dir), device="cpu", dtype="float32", block_size=4, num_kv_blocks=64,
                        max_model_len=128, max_num_seqs=2, enable_prefix_caching=True)
    res = run_benchmark(make_workload(_mixed(shared_prefix_len=16)), "continuous",
                        BenchConfig(engine=base, warmup_requests=2), rates=[None, None])
    first, second = res.results
    assert first["prefix_hits"] == second["prefix_hits"] > 0
    assert first["prefix_hits"] < first["prefix_queries"] - 16  # the first request computed the prefix
