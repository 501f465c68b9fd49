"""The attention-layer timer (engine/bench/attention_layer.py): both output paths timed, and the same output."""
from __future__ import annotations

import json

import torch

from engine.bench import attention_layer


def test_both_paths_are_timed_and_give_the_same_output(tmp_path, capsys):
    out = tmp_path / "layer.json"
    attention_layer.main(["--rows", "1,3", "--context", "20", "--rounds", "2", "--calls", "2", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [r["rows"] for r in rows] == [1, 3] and all(r["scatter_us"] > 0 and r["in_order_us"] > 0 for r in rows)
    assert "in order" in capsys.readouterr().out
    fns = attention_layer.layer_calls(3, 20)  # (what is timed is the same attention either way)
    assert torch.equal(fns[False]()[0], fns[True]()[0])
