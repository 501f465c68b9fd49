"""The nucleus-size counter (engine/bench/nucleus_sizes.py) on a tiny model, and its rule against a row's own."""
from __future__ import annotations

import json

import torch

from engine.bench import nucleus_sizes


def test_the_nucleus_is_what_the_sampler_keeps():
    logits = torch.tensor([0.15, 0.5, 0.05, 0.3]).log()  # (mass before each, most likely first: 0, .5, .8, .95)
    assert [nucleus_sizes.nucleus_size(logits, 1.0, p) for p in (0.4, 0.5, 0.79, 0.81, 0.96)] == [1, 1, 2, 3, 4]


def test_sizes_are_counted_for_every_setting(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "nucleus.json"
    nucleus_sizes.main(["--model", str(tiny_llama_dir), "--tokens", "3", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [(r["temperature"], r["top_p"]) for r in rows] == list(nucleus_sizes.SETTINGS)
    assert all(r["steps"] > 0 and 1 <= r["median"] <= r["max"] and 0 <= r["share_past_candidates"] <= 1 for r in rows)
    assert "past 1024" in capsys.readouterr().out
