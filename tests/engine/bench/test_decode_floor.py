"""The decode-step-versus-memory-floor benchmark (engine/bench/decode_floor.py) on a tiny model."""
from __future__ import annotations

import json

from engine.bench import decode_floor


def test_rows_time_decode_only_steps_and_count_their_bytes(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "floor.json"
    decode_floor.main(["--model", str(tiny_llama_dir), "--device", "cpu", "--batches", "1,4",
                       "--context", "40", "--steps", "3", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["config"]["context"] == 40 and result["config"]["host"]["torch"]
    one, four = result["rows"]
    assert (one["batch"], four["batch"]) == (1, 4)
    # Every weight once per step, and each row's KV (40 prompt tokens + the middle step's outputs).
    assert one["bytes"] > result["weight_bytes"]
    kv_row = one["bytes"] - result["weight_bytes"]
    assert four["bytes"] - result["weight_bytes"] == 4 * kv_row
    assert kv_row % result["kv_bytes_per_token"] == 0 and kv_row // result["kv_bytes_per_token"] > 40
    for r in (one, four):
        assert r["step_ms"] > 0
        assert abs(r["memory_floor_ms"] / 1e3 * result["peaks"]["bytes_per_s"] - r["bytes"]) < 1
        assert abs(r["x_memory_floor"] - r["step_ms"] / r["memory_floor_ms"]) < 1e-6
    assert "x floor" in capsys.readouterr().out



def test_overlap_on_and_off_side_by_side(tiny_llama_dir, tmp_path, capsys):
    """--overlap on,off: an engine each (the second on the first's weights), every batch measured on both;
    the same steps' bytes either way."""
    out = tmp_path / "floor.json"
    decode_floor.main(["--model", str(tiny_llama_dir), "--device", "cpu", "--batches", "1,3", "--context", "20",
                       "--steps", "3", "--overlap", "on,off", "--json", str(out)])
    result = json.loads(out.read_text())
    assert result["config"]["overlap"] == [True, False]
    rows = result["rows"]
    assert [(r["batch"], r["overlap"]) for r in rows] == [(1, True), (1, False), (3, True), (3, False)]
    assert rows[0]["bytes"] == rows[1]["bytes"] and rows[2]["bytes"] == rows[3]["bytes"]
    assert "overlap" in capsys.readouterr().out
