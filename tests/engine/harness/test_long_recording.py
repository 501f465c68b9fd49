"""A long recording from a short one (engine/harness/long_recording.py): each pass the source's events with
its request ids moved and its times after the last pass's, chunked as the recorder chunks, and measured."""
from __future__ import annotations

import json

from engine.events import StepEntry, full_entries, sampled_ids
from engine.harness import long_recording
from engine.kv_wire import is_key
from engine.workshop.recording import SHIPPED, format, load
from engine_helpers import whole_kv
from repo_paths import ROOT

H100 = ROOT / "docs" / "perf" / "2026-11-27-h100-socket" / "gpu_socket.jsonl.gz"  # a real run, as recorded then


def rows_of(step: dict) -> list[list]:
    """A step's rows written out whole (each with every field: older recordings lack the later ones)."""
    return [StepEntry(*e).to_list() for e in full_entries(step["entries"])]


def test_passes_of_the_source_with_ids_moved_in_chunks_that_each_start_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(format, "CHUNK_BYTES", 20_000)
    out, page, js = tmp_path / "long.jsonl.gz", tmp_path / "long.html", tmp_path / "long.json"
    assert long_recording.main([str(SHIPPED), "--minutes", "2", "-o", str(out), "--page", str(page),
                                "--json", str(js)]) == 0
    res, source, rec = json.loads(js.read_text()), load(SHIPPED), load(out)
    span = source.end - source.chunks[0].t0
    assert res["passes"] == 3 and 120 <= res["span_s"] < 120 + span and res["chunks"] == len(rec.chunks) > 3
    assert res["file_bytes"] == out.stat().st_size and res["page_mib"] > 0
    events = [e for _, e in rec.events]
    lanes = [i for i, e in enumerate(events) if e["type"] == "lanes"]
    # each chunk opens with the lanes, and each pass has the source's own
    assert len(lanes) == len(rec.chunks) + 2 and len(events) - len(lanes) == 3 * (len(source) - 1)
    requests = [(e["lane"], e["request_id"]) for e in events if e["type"] == "request"]
    assert len(requests) == len(set(requests)) == 3 * sum(1 for _, e in source.events if e["type"] == "request")
    src = whole_kv([e for _, e in source.events if e["type"] != "lanes"])
    steps = [e for e in whole_kv([e for e in events if e["type"] != "lanes"]) if e["type"] == "step"]
    src_steps = [e for e in src if e["type"] == "step"]
    for k in range(3):  # each pass: the source's tables, rows and samples, under its own ids
        got, want = steps[k * len(src_steps):(k + 1) * len(src_steps)], [long_recording.moved(e, k) for e in src_steps]
        assert [e["kv"] for e in want] == [e["kv"] for e in got]
        assert [rows_of(e) for e in want] == [rows_of(e) for e in got]
        assert [sorted(sampled_ids(e)) for e in want] == [sorted(sampled_ids(e)) for e in got]
    for i in range(len(rec.chunks)):  # every chunk starts whole: the lanes, then each lane's tables
        chunk = [json.loads(x) for x in rec.chunk(i).texts]
        firsts = {}
        for e in chunk:
            if e["type"] == "step":
                firsts.setdefault(e["lane"], e)
        assert chunk[0]["type"] == "lanes" and all(is_key(e["kv"]) for e in firsts.values())


def test_a_gpu_runs_steps_go_as_the_socket_sends_them_today(tmp_path):
    """The H100 recording (KV changes between key frames, as recorded then): its steps written with their rows
    that go on as runs, never on a step whose tables are whole, and read back as they were."""
    source = load(H100)
    out = tmp_path / "gpu.jsonl.gz"
    assert long_recording.main([str(H100), "--minutes", "0.1", "-o", str(out)]) == 0
    events = [e for _, e in load(out).events if e["type"] == "step"]
    assert any(e.get("cont") for e in events) and not any(e.get("cont") and is_key(e["kv"]) for e in events)
    got = [rows_of(e) for e in whole_kv(events)]
    want = [rows_of(e) for e in whole_kv([e for _, e in source.events if e["type"] == "step"])]
    assert got[:len(want)] == want  # (its first pass: the source's own ids)
