"""The host-pieces timer (engine/bench/host_pieces.py) on a tiny model: every piece of a decode-only step."""
from __future__ import annotations

import json

from engine.bench import host_pieces


def test_each_piece_of_a_decode_step_is_timed(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "pieces.json"
    host_pieces.main(["--model", str(tiny_llama_dir), "--rows", "1,3", "--context", "12", "--number", "3",
                      "--repeat", "2", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [r["rows"] for r in rows] == [1, 3]
    assert all(r[p] > 0 for r in rows for p in host_pieces.PIECES)
    assert "build + stage" in capsys.readouterr().out
