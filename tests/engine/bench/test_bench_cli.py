"""The benchmark end to end on a tiny model: CLI, JSON/CSV output, rate sweeps, Python API, cancel."""
from __future__ import annotations

import csv
import json
import threading

import pytest

from engine.bench import BenchConfig, Cancelled, make_workload, preset, run_benchmark
from engine.bench.__main__ import main
from engine.config import EngineConfig

KEYS = ("strategy", "output_tokens_per_s", "requests_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p50_s",
        "padding_waste_pct", "kv_waste_pct", "mean_batch_size", "goodput_requests_per_s", "queue_wait_p50_s")


def _tiny_args(model_dir, workload="tiny"):
    return ["--model", str(model_dir), "--device", "cpu", "--dtype", "float32", "--workload", str(workload),
            "--block-size", "4", "--kv-blocks", "64", "--max-model-len", "128", "--max-num-seqs", "4",
            "--static-batch-size", "3", "--warmup", "1", "--no-progress"]


def _engine(model_dir, **kw):
    return EngineConfig(model=str(model_dir), device="cpu", dtype="float32", block_size=4, num_kv_blocks=64,
                        max_model_len=128, max_num_seqs=4, static_batch_size=3, **kw)


def _cfg(model_dir, **kw):
    return BenchConfig(engine=_engine(model_dir), warmup_requests=1, **kw)


def test_cli_all_strategies_end_to_end(tiny_llama_dir, tmp_path, capsys):
    out_json, out_csv, trace = tmp_path / "out.json", tmp_path / "out.csv", tmp_path / "trace.jsonl"
    rc = main(_tiny_args(tiny_llama_dir) + [
        "--strategies", "continuous,static,dynamic,hf-generate,hf-cb", "--json", str(out_json),
        "--csv", str(out_csv), "--save-trace", str(trace), "--slo-ttft", "30"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "speedup vs static" in printed and "speedup vs hf-generate" in printed
    data = json.loads(out_json.read_text())
    assert data["config"]["workload"]["num_requests"] == 8
    assert data["config"]["bench"]["slo_ttft_s"] == 30
    results = data["results"]
    assert [r["strategy"] for r in results] == ["continuous", "static", "dynamic", "hf-generate", "hf-cb"]
    expected_tokens = data["config"]["workload"]["output_tokens_total"]
    for r in results:
        for k in KEYS:
            assert k in r, (r["strategy"], k)
        assert r["completed"] == 8 and r["failed"] == 0, r["strategy"]
        assert r["output_tokens"] == expected_tokens, r["strategy"]  # same workload, EOS ignored
        assert r["output_tokens_per_s"] > 0 and r["ttft_p50_s"] > 0 and r["e2e_p99_s"] >= r["e2e_p50_s"]
        assert "vs_static_output_tokens_per_s" in r and "vs_hf_generate_output_tokens_per_s" in r
    by = {r["strategy"]: r for r in results}
    assert by["continuous"]["padding_waste_pct"] == 0
    assert by["static"]["padding_waste_pct"] > 0 and by["hf-generate"]["padding_waste_pct"] > 0
    assert by["static"]["kv_waste_pct"] > by["continuous"]["kv_waste_pct"]
    assert by["hf-cb"]["kv_waste_pct"] is None
    for name in ("continuous", "static", "dynamic"):  # our engine reports its telemetry's cost
        assert 0 < by[name]["telemetry_pct"] < 100, name
    assert by["hf-generate"]["telemetry_pct"] is None and "telem %" in printed
    assert by["hf-cb"]["info"]["continuous_batching_config"]["max_batch_tokens"] == 512
    assert by["hf-cb"]["info"]["kv_blocks"] == 64
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["strategy"] for r in rows] == [r["strategy"] for r in results]
    assert trace.read_text().count("\n") == 9  # header + 8 requests, replayable:
    assert main(_tiny_args(tiny_llama_dir, workload=trace) + ["--strategies", "continuous"]) == 0


def test_cli_rate_sweep(tiny_llama_dir, tmp_path):
    out = tmp_path / "sweep.json"
    assert main(_tiny_args(tiny_llama_dir) + ["--strategies", "continuous,static", "--rates", "0,40",
                                              "--json", str(out), "--details"]) == 0
    data = json.loads(out.read_text())
    assert [(r["strategy"], r["rate"]) for r in data["results"]] == [
        ("continuous", None), ("static", None), ("continuous", 40.0), ("static", 40.0)]
    online = [run for run in data["runs"] if run["rate"] == 40.0]
    for run in online:
        arrivals = sorted(q["arrival_s"] for q in run["requests"])
        assert arrivals[-1] > 0
        for q in run["requests"]:
            assert q["scheduled_s"] >= q["arrival_s"] - 1e-9 and q["first_token_s"] >= q["scheduled_s"]
    assert all(run["steps"] for run in data["runs"])


def test_cli_rejects_bad_input(tiny_llama_dir, capsys):
    assert main(_tiny_args(tiny_llama_dir) + ["--strategies", "continuous,turbo"]) == 2
    assert "unknown strategy turbo" in capsys.readouterr().err
    assert main(_tiny_args(tiny_llama_dir) + ["--rates", "fast"]) == 2


def test_python_api_progress_and_cancel(tiny_llama_dir):
    seen = []
    res = run_benchmark(make_workload(preset("tiny", num_requests=4)), ["continuous", "hf-generate"],
                        _cfg(tiny_llama_dir), repeat=2, progress=seen.append)
    assert [r["strategy"] for r in res.results] == ["continuous", "hf-generate"]
    for r in res.results:  # the best of two interleaved runs is kept, both are listed
        tries = r["info"]["repeats"]
        assert len(tries) == 2 and r["output_tokens_per_s"] == max(t["output_tokens_per_s"] for t in tries)
    for name in ("continuous", "hf-generate"):
        runs = [p for p in seen if p.strategy == name and p.stage in ("run", "done")]
        assert runs[-1].stage == "done" and runs[-1].done == runs[-1].total == 4

    cancel = threading.Event()

    def stop_after_first(p):
        if p.stage == "run" and p.done >= 1:
            cancel.set()

    with pytest.raises(Cancelled):
        run_benchmark(make_workload(preset("tiny")), "static", _cfg(tiny_llama_dir), progress=stop_after_first,
                      cancel=cancel)


def test_cli_lanes_side_by_side_with_a_peer(tiny_llama_dir, tmp_path, capsys):
    lanes_file, out_json, out_csv = tmp_path / "lanes.json", tmp_path / "out.json", tmp_path / "out.csv"
    lanes_file.write_text(json.dumps({"big blocks": {"strategy": "static", "block_size": 8}}))
    rc = main(_tiny_args(tiny_llama_dir) + ["--num-requests", "4", "--lanes", "small.4:block_size=4",
                                            "--lanes", str(lanes_file), "--strategies", "hf-generate",
                                            "--json", str(out_json), "--csv", str(out_csv)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "speedup vs big blocks" in printed and "speedup vs hf-generate" in printed
    assert "lanes: small.4 (base); big blocks (static, block 8)" in printed
    data = json.loads(out_json.read_text())
    assert data["config"]["lanes"] == {"small.4": {}, "big blocks": {"strategy": "static", "block_size": 8}}
    results = data["results"]
    assert [(r["lane"], r["strategy"]) for r in results] == [
        ("small.4", "continuous"), ("big blocks", "static"), ("hf-generate", "hf-generate")]
    by = {r["lane"]: r for r in results}
    assert by["small.4"]["info"]["block_size"] == 4 and by["big blocks"]["info"]["block_size"] == 8
    for r in results:  # ratios against the static lane and against hf-generate, whatever the names
        assert r["completed"] == 4
        assert r["vs_big_blocks_output_tokens_per_s"] > 0 and r["vs_hf_generate_output_tokens_per_s"] > 0
    assert by["big blocks"]["vs_big_blocks_output_tokens_per_s"] == 1.0
    assert [r["lane"] for r in csv.DictReader(out_csv.open())] == ["small.4", "big blocks", "hf-generate"]


@pytest.mark.parametrize("lane, message", [
    ("a:blok_size=4", "unknown EngineConfig field 'blok_size'"),
    ("a:block_size=big", "EngineConfig.block_size"),
    ("a/b:block_size=4", "lane name 'a/b'"),
    ("turbo", "lane 'turbo' has no settings"),
    ("static", "'static' is used twice"),
])
def test_cli_rejects_bad_lanes(tiny_llama_dir, capsys, lane, message):
    assert main(_tiny_args(tiny_llama_dir) + ["--strategies", "static", "--lanes", lane]) == 2
    assert message in capsys.readouterr().err


def test_a_remote_server_runs_the_same_workload_timed_at_the_client(tiny_llama_dir, tmp_path, capsys):
    """Our own server on the same tiny model as the remote (--remote NAME=URL): every request served,
    the same greedy tokens counted, labelled remote and timed at the client, no step metrics."""
    from engine.api.server import create_app
    from service_helpers import make_service, serve

    server = make_service(tiny_llama_dir, strategies=("continuous",), max_model_len=128)
    out = tmp_path / "remote.json"
    try:
        with serve(create_app(server)) as addr:
            assert main(_tiny_args(tiny_llama_dir) + ["--strategies", "continuous", "--remote",
                                                      f"ours served=http://{addr}/v1", "--json", str(out)]) == 0
    finally:
        server.stop()
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    local, far = data["results"]
    assert (far["lane"], far["strategy"]) == ("ours served", "remote") and far["info"]["timed_at"] == "client"
    assert far["completed"] == local["completed"] == 8 and far["failed"] == 0
    assert far["output_tokens"] == local["output_tokens"] == data["config"]["workload"]["output_tokens_total"]
    assert far["ttft_p50_s"] > 0 and far["padding_waste_pct"] is None and far["telemetry_pct"] is None
    assert data["config"]["lanes"]["ours served"]["remote"] == f"http://{addr}/v1"
    assert "ours served" in printed
    assert main(_tiny_args(tiny_llama_dir) + ["--remote", "no url"]) == 2  # NAME=URL, said before anything runs
