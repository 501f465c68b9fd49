"""The socket at a device's pace (engine/harness/gpu_socket.py), end to end on a tiny model: its own server
process running the app's routes (uvicorn), the load with and without clients, and the recording."""
from __future__ import annotations

import json

from engine.harness import gpu_socket
from engine.workshop.recording.format import load


def test_rounds_with_and_without_clients_and_the_first_recorded(tmp_path, tiny_llama_dir):
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
    recorded = load(rec)  # the first round, whole: each lane's 8 requests finished in it
    assert first["recording"]["events"] == len(recorded) - 1 and not first["recording"]["full"]
    finished = [e for _, e in recorded.events if e.get("type") == "step" for _ in e["finished"]]
    assert len(finished) == 2 * 8
