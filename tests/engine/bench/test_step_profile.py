"""The step profiler (engine/bench/step_profile.py) on a tiny model: real decode steps, split by phase."""
from __future__ import annotations

import gzip
import json

import pytest

from engine.bench import step_profile


def test_profile_splits_decode_steps_into_phases(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "profile.json"
    step_profile.main(["--model", str(tiny_llama_dir), "--batches", "1,3", "--contexts", "12", "--steps", "3",
                       "--linear", "torch", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["batch"], r["context"], r["steps"]) for r in rows] == [(1, 12, 3), (3, 12, 3)]
    for r in rows:
        assert r["linear"] == "torch" and r["attention"] == "torch" and r["cuda_graphs"] == "off"
        assert r["gpu_busy_ms"] == 0.0  # no GPU: no device time
        phases = sum(r["phases_ms"].values())
        assert 0 < r["phases_ms"]["forward"] and phases <= r["step_ms"] * 1.05
        assert abs(sum(r["forward_ms"].values()) - r["phases_ms"]["forward"]) < 0.05 * r["phases_ms"]["forward"] + 0.01
        # the host's share: the step less its forward (no GPU), per step and per row
        assert abs(r["host_ms"] - (r["step_ms"] - r["phases_ms"]["forward"])) < 1e-6
        assert abs(r["host_us_per_row"] - 1e3 * r["host_ms"] / r["batch"]) < 1e-6
    assert "batch build" in capsys.readouterr().out


def test_wall_clock_mode_times_the_same_steps_without_the_profiler(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "profile.json"
    step_profile.main(["--model", str(tiny_llama_dir), "--batches", "2", "--contexts", "12", "--steps", "3",
                       "--no-ops", "--json", str(out)])
    (r,) = json.loads(out.read_text())["rows"]
    assert r["forward_ms"] == {} and 0 < r["host_ms"] < r["step_ms"]
    text = capsys.readouterr().out
    assert "wall clock, no profiler" in text and "host/row us" in text and "fwd:" not in text
    # each step's host time: the steps' mean is the row's host time
    each = r["host_us_each_step"]
    assert len(each) == 3 and abs(sum(each) / 3e3 - r["host_ms"]) < 0.05 * r["host_ms"]


def test_per_step_prints_each_timed_steps_host_time(tiny_llama_dir, capsys):
    step_profile.main(["--model", str(tiny_llama_dir), "--batches", "2", "--contexts", "12", "--steps", "4",
                       "--warm-steps", "0", "--no-ops", "--per-step"])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    head, values = line.rsplit(":", 1)
    assert head == "batch 2, context 12: host us of each step after 0 warm" and len(values.split()) == 4


def test_a_temperature_and_top_p_make_the_profiled_rows_sample(tiny_llama_dir, monkeypatch):
    """--temperature and --top-p reach every request (the sampled path timed); --mixed refuses a temperature,
    and a top_p needs one."""
    asked, real = [], step_profile.SamplingParams

    def params(**kw):
        asked.append((kw.get("temperature", 0.0), kw.get("top_p", 1.0)))
        return real(**kw)
    monkeypatch.setattr(step_profile, "SamplingParams", params)
    step_profile.main(["--model", str(tiny_llama_dir), "--batches", "2", "--contexts", "12", "--steps", "2",
                       "--no-ops", "--temperature", "0.8", "--top-p", "0.9"])
    assert asked and set(asked[1:]) == {(0.8, 0.9)}  # (the first: the warm-up's, greedy)
    for flags in (["--mixed", "--temperature", "0.8"], ["--top-p", "0.9"]):
        with pytest.raises(SystemExit):
            step_profile.main(["--model", str(tiny_llama_dir), *flags])


def test_fill_leaves_every_row_decoding_through_the_timed_steps(tiny_llama_dir):
    """The prompts need several steps to prefill: the rows that finish first keep decoding until the
    last one does, and then for `steps` more steps, all of them at once."""
    from engine_helpers import make_engine
    eng = make_engine(tiny_llama_dir, max_num_batched_tokens=32, max_num_seqs=4)
    step_profile.fill(eng, [40] * 4, 3)
    for _ in range(3):
        ev = eng.step()
        assert len(ev.entries) == 4 and {e.phase for e in ev.entries} == {"decode"}


def test_warm_steps_run_before_the_timed_ones_and_every_row_decodes_through_both(tiny_llama_dir):
    """--warm-steps: that many decode steps of the whole batch run untimed (outside the phase timer), then
    the timed ones, each still decoding every row (fill leaves tokens for both)."""
    from engine_helpers import make_engine
    eng = make_engine(tiny_llama_dir, max_num_batched_tokens=32, max_num_seqs=4)
    seen, step = [], eng.step

    def watched():
        ev = step()
        timed = "schedule" in vars(eng.scheduler)  # (PhaseTimer wraps it on the instance)
        seen.append((timed, len([e for e in ev.entries if e.phase == "decode"])))
        return ev
    eng.step = watched
    row = step_profile.profile_point(eng, [40] * 3, 4, ops=False, warm=5)
    assert row["steps"] == 4 and row["warm_steps"] == 5
    assert seen[-9:] == [(False, 3)] * 5 + [(True, 3)] * 4


def test_a_trace_of_each_point_labels_the_engines_phases(tiny_llama_dir, tmp_path, capsys):
    """--trace: each point's profiler timeline, gzipped, with the engine's phases as named ranges on the
    host's thread (where a GPU step waits, and for what, shows there)."""
    traces = tmp_path / "traces"
    step_profile.main(["--model", str(tiny_llama_dir), "--batches", "1,2", "--contexts", "12", "--steps", "2",
                       "--linear", "torch", "--overlap", "off", "--trace", str(traces)])
    files = sorted(p.name for p in traces.iterdir())
    assert files == ["step_b1_c12_torch_overlap_off.json.gz", "step_b2_c12_torch_overlap_off.json.gz"]
    events = json.loads(gzip.decompress((traces / files[1]).read_bytes()))["traceEvents"]
    named = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"schedule", "launch", "forward", "update + detokenize", "telemetry"} <= named
    assert any(name.startswith("aten::") for name in named)  # the operators beside them


def test_a_trace_needs_the_profiler(tiny_llama_dir, tmp_path):
    with pytest.raises(SystemExit):
        step_profile.main(["--model", str(tiny_llama_dir), "--no-ops", "--trace", str(tmp_path)])
