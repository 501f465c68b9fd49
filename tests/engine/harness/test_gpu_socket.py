"""The socket at a device's pace (engine/harness/gpu_socket.py), end to end on a tiny model: its own server
process running the app's routes (uvicorn), the recorded load, then the load with and without clients."""
from __future__ import annotations

import json

from engine.harness import gpu_socket  # (the app tier: it starts a uvicorn server)
from engine.workshop.recording.format import load


def test_a_recorded_load_then_rounds_with_and_without_clients(tmp_path, tiny_llama_dir):
    rec, out = tmp_path / "run.jsonl.gz", tmp_path / "run.json"
    assert gpu_socket.main(["--model", str(tiny_llama_dir), "--device", "cpu", "--dtype", "float32", "--rows", "4",
                            "--kv-memory-gb", "0.01", "--requests", "8", "--max-tokens", "5", "--clients", "2",
                            "--rounds", "1", "--record", str(rec), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    first, with_clients = result["rounds"]
    assert (first["clients"], with_clients["clients"]) == (0, 2) and not first["meters"]
    for r in result["rounds"]:  # every request answered on both lanes, every token counted
        assert set(r["strategies"]) == {"continuous", "static"}
        assert all(v["tokens"] == 8 * 5 and v["decode_rows_max"] == 4 for v in r["strategies"].values())
    assert len(with_clients["meters"]) == 2 and all(m["steps_per_s"] > 0 and m["wire_kb_per_s"] > 0
                                                    for m in with_clients["meters"])
    socket = result["summary"]["2"]["socket_per_client"]
    assert socket["socket_kb_per_s"] > socket["wire_kb_per_s"] > 0  # deflated on the network
    assert socket["busy_s"] > 0 and socket["busy_steps_per_s"] > 0  # (the rates while steps came, too)
    assert set(result["summary"]["2"]["lanes"]["static"]) == {"decode_step_ms_p50", "tokens_per_s", "slowdown_pct"}
    recorded = load(rec)  # the load before the rounds, whole: each lane's 8 requests finished in it
    assert result["recording"]["events"] == len(recorded) and not result["recording"]["full"]
    finished = [e for _, e in recorded.events if e.get("type") == "step" for _ in e["finished"]]
    assert len(finished) == 2 * 8


def test_the_summary_pairs_each_round_with_its_own_run_without_clients():
    def rec(rnd, clients, tok_s):
        lane = {"tokens_per_s": tok_s, "decode_step_ms_p50": 4.0}
        meters = [{"wire_kb_per_s": 300.0 + rnd, "deflate": "permessage-deflate"}] * clients
        return {"round": rnd, "clients": clients, "strategies": {"continuous": lane}, "meters": meters}
    # round 1 is 20% slower throughout, so only its own run without clients says what the clients cost (10%)
    out = gpu_socket.summary([rec(0, 0, 100.0), rec(0, 2, 100.0), rec(1, 0, 80.0), rec(1, 2, 80 / 1.1)])
    assert round(out["2"]["lanes"]["continuous"]["slowdown_pct"], 6) == 5.0  # the median of 0% and 10%
    assert out["0"]["lanes"]["continuous"]["slowdown_pct"] == 0.0
    assert out["2"]["socket_per_client"] == {"wire_kb_per_s": 300.5} and out["0"]["socket_per_client"] is None
