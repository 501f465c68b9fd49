"""Recordings are uploads: bounded before the work (file size, decompressed size of each chunk and of all,
line length, event count), checked against the event contract before any event reaches the views (the
first chunk before the recording replaces the live stream, refused as "Cannot play FILE: line N: reason"
with the views left live; a later one before it plays, stopping the replay there), and their memory comes
back after a refused or finished replay."""
from __future__ import annotations

import gc
import gzip
import json
import tracemalloc
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.workshop.recording import format, load, play, play_file, source, stop_replay
from engine.workshop.recording.stage import SHIPPED
from engine.workshop.recording.web_page import web_page

LINES = gzip.decompress(SHIPPED.read_bytes()).decode().splitlines()
HEADER, LANES_EVENT, FIRST = json.loads(LINES[0]), LINES[1], json.loads(LINES[2])


def recording(*lines) -> bytes:
    return gzip.compress("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines).encode())


def live():
    return SimpleNamespace(replay=None, replay_error=None)  # what play_file touches of a service


def without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


def kv_step(kv: dict) -> dict:
    """A step of the recording's first lane with this `kv` and nothing scheduled."""
    return {"type": "step", "lane": "continuous", "step": 1, "t_start": 0, "t_end": 1, "entries": [],
            "num_waiting": 0, "num_running": 0, "kv": kv}


MALFORMED = [
    ("a header without a model", recording(without(HEADER, "model"), LANES_EVENT), "line 1: model"),
    ("a header without lanes", recording(without(HEADER, "lanes"), LANES_EVENT), "line 1: lanes"),
    ("a header of another version", recording({**HEADER, "version": 9}, LANES_EVENT), "line 1: recording version 9"),
    ("an event without a type", recording(HEADER, LANES_EVENT, {"t": 100.0, "event": without(FIRST["event"], "type")}),
     "line 3: event.type"),
    ("an event that is not an object", recording(HEADER, LANES_EVENT, {"t": 100.0, "event": [1, 2]}),
     "line 3: event must be an object"),
    ("a time that is not a number", recording(HEADER, LANES_EVENT, {**FIRST, "t": "soon"}), "line 3: t must be"),
    ("a line that is a list", recording(HEADER, LANES_EVENT, "[1, 2, 3]"), "line 3: each event line"),
    ("a step without its entries", recording(HEADER, LANES_EVENT, {"t": 9.0, "event": {
        "type": "step", "lane": "continuous", "step": 0, "t_start": 0, "t_end": 1, "num_waiting": 0,
        "num_running": 0, "kv": {"num_blocks": 1, "block_size": 16, "used": 0, "block_tables": {}}}}),
     "line 3: event: entries is missing"),
    ("an event of a lane never named", recording(HEADER, LANES_EVENT, {**FIRST, "event": {**FIRST["event"],
                                                                                           "lane": "ghost"}}),
     "line 3: event.lane 'ghost'"),
    ("a lone surrogate", recording(HEADER, LANES_EVENT, '{"t": 8.0, "event": {"type": "status", "event": "\\ud800"}}'),
     "line 3: event.event is not valid Unicode"),
    ("NaN", recording(HEADER, LANES_EVENT, '{"t": NaN, "event": {"type": "status", "event": "x"}}'),
     "line 3: t: NaN is not a JSON number"),
    ("KV changes that add up to more tables than a pool holds", recording(HEADER, LANES_EVENT, *[
        {"t": 100.0 + i, "event": kv_step({"num_blocks": 8, "block_size": 16, "used": 0, "tables": {
            str(r): [0, 1] for r in range(i * 2048, (i + 1) * 2048)}})} for i in range(3)]),
     "line 5: event.kv holds more than 4096 block tables"),
    ("KV changes that make a table longer than its pool", recording(HEADER, LANES_EVENT, *[
        {"t": 100.0 + i, "event": kv_step({"num_blocks": 8, "block_size": 16, "used": 0,
                                           "tables": {"1": [4 * i, 1, 2, 3, 4]}})} for i in range(3)]),
     "line 5: event.kv holds a block table longer than its pool"),
    ("a KV change that starts before 0", recording(HEADER, LANES_EVENT, {"t": 100.0, "event": kv_step(
        {"num_blocks": 8, "block_size": 16, "used": 0, "tables": {"1": [-1, 2]}})}), "line 3: event.kv.tables.1"),
    ("not gzip", b"{}", "not a complete gzip file"),
    ("cut short", recording(HEADER, LANES_EVENT)[:-9], "not a complete gzip file"),
]


@pytest.mark.parametrize("what,data,reason", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_recording_leaves_the_views_live_and_names_its_line(what, data, reason):
    svc = live()
    problem = play_file(svc, data, "talk.jsonl.gz")
    assert problem.startswith(f"Cannot play talk.jsonl.gz: {reason}"), problem
    assert svc.replay is None and source(svc) is svc


def test_a_good_upload_plays_and_a_bad_one_then_leaves_it_playing():
    svc = live()
    assert play_file(svc, SHIPPED.read_bytes(), "shipped.jsonl.gz") is None and svc.replay is not None
    playing = svc.replay
    assert play_file(svc, MALFORMED[0][1], "bad.jsonl.gz").startswith("Cannot play bad.jsonl.gz: line 1")
    assert svc.replay is playing and playing.active
    stop_replay(svc)


def test_bounds_are_checked_before_anything_is_parsed(monkeypatch):
    monkeypatch.setattr(format, "MAX_EVENTS", 100)
    with pytest.raises(ValueError, match="more than 100 events"):
        load(recording(HEADER, *LINES[1:]))
    monkeypatch.setattr(format, "MAX_LINE_BYTES", 5000)
    with pytest.raises(ValueError, match="line 3: longer than 5,000 bytes"):
        load(recording(HEADER, LANES_EVENT, json.dumps({"t": 100, "event": {"type": "status", "event": "x" * 6000}})))
    monkeypatch.setattr(format, "MAX_BYTES", 1 << 20)
    monkeypatch.setattr(format, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(format, "MAX_EVENTS", 10**6)
    with pytest.raises(ValueError, match="more than 1,048,576 bytes of events"):
        load(recording(HEADER, *([LINES[5]] * 2000)))


def _traced(fn) -> tuple[int, int]:
    """(peak, kept) Python memory of fn() over what was allocated before, in bytes."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        gc.collect()
        now, peak = tracemalloc.get_traced_memory()
        return peak - before, now - before
    finally:
        tracemalloc.stop()


def test_a_bomb_is_refused_in_little_memory_and_keeps_none():
    """300,000 events in 0.5 MB of gzip (past MAX_EVENTS and MAX_BYTES): refused having held one line."""
    bomb = recording(HEADER, *([LINES[5]] * 300_000))
    assert len(bomb) < 1 << 20

    def refuse():
        with pytest.raises(ValueError, match="more than"):
            load(bomb)
    peak, kept = _traced(refuse)
    assert peak < 4 << 20 and kept < 64 << 10, (peak, kept)


def test_a_finished_replay_gives_its_memory_back():
    events = [json.loads(x) for x in LINES[2:]]
    big = recording(HEADER, LANES_EVENT, *(json.dumps({**e, "t": e["t"] + 60 * k}) for k in range(20) for e in events))

    def play_through():
        svc = live()
        assert play_file(svc, big, "big.jsonl.gz") is None
        r = svc.replay
        r.seek(r.recording.end)  # everything published
        assert r.ended and len(r.hub) >= len(events) * 20
        stop_replay(svc)
        assert svc.replay is None
    peak, kept = _traced(play_through)
    assert peak > 1 << 20 and kept < 256 << 10, (peak, kept)


def test_a_replay_that_fails_hands_the_views_back():
    svc = live()
    assert play_file(svc, SHIPPED.read_bytes(), "shipped.jsonl.gz") is None
    r = svc.replay

    def broken():
        raise RuntimeError("a bug in the replay")
    r.pump = broken
    r._wake.set()
    r._thread.join(5)
    assert not r.active and svc.replay is None and source(svc) is svc


def members(*groups) -> bytes:
    """A recording written as one gzip member (chunk) per group of lines."""
    return b"".join(recording(*lines) for lines in groups)


EVENTS = LINES[2:]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, len(EVENTS) - 1), max_size=8, unique=True))
def test_however_a_recording_is_cut_into_chunks_it_reads_the_same(cuts):
    cuts = sorted(cuts)
    groups = [EVENTS[a:b] for a, b in zip([0, *cuts], [*cuts, len(EVENTS)])]
    rec, whole = load(members([HEADER, LANES_EVENT, *groups[0]], *groups[1:])), load(SHIPPED)
    assert len(rec.chunks) == len(groups) and rec.events == whole.events and len(rec) == len(whole)
    assert (rec.start, rec.end) == (whole.start, whole.end)
    for i, chunk in enumerate(rec.chunks):
        assert rec.chunk_at(chunk.t0) <= i == rec.chunk_at(chunk.t1) or rec.chunks[i + 1].t0 == chunk.t1


def test_a_chunk_that_is_wrong_stops_the_replay_there_and_says_which_line():
    bad = {"t": json.loads(EVENTS[19])["t"], "event": without(FIRST["event"], "type")}
    data = members([HEADER, LANES_EVENT, *EVENTS[:10]], [*EVENTS[10:20], bad])
    rec = load(data)  # the first chunk is checked; the second when the playhead nears it
    assert len(rec.chunks) == 2 and len(rec) == 22
    svc = live()
    assert play_file(svc, data, "late.jsonl.gz") is None
    r = svc.replay
    r.seek(rec.end)  # (as the page's slider does)
    r._thread.join(5)
    assert not r.active and svc.replay is None and source(svc) is svc
    assert r.error.startswith("line 23: event.type"), r.error
    assert svc.replay_error == f"The replay stopped: {r.error}"  # (the replay panel shows it)
    play(svc, load(data), speed=4.0)  # played through, not sought: the same
    svc.replay._thread.join(10)
    assert svc.replay is None and svc.replay_error.startswith("The replay stopped: line 23: event.type")
    with pytest.raises(format.RecordingError, match="line 23: event.type"):
        web_page(rec)


@pytest.mark.parametrize("bound,value,reason", [
    ("MAX_CHUNKS", 2, "more than 2 chunks"),
    ("MAX_FILE_BYTES", 1000, "the file is larger than 1,000 bytes"),
    ("MAX_CHUNK_BYTES", 20_000, "a chunk holds more than 20,000 bytes"),
])
def test_a_recording_past_a_bound_of_its_chunks_is_refused(monkeypatch, bound, value, reason):
    monkeypatch.setattr(format, bound, value)
    with pytest.raises(ValueError, match=reason):
        load(members([HEADER, LANES_EVENT, *EVENTS[:100]], EVENTS[100:200], EVENTS[200:]))


def test_a_chunk_before_the_previous_one_in_time_is_refused_when_loaded():
    with pytest.raises(ValueError, match="line 13: t goes back in time"):
        load(members([HEADER, LANES_EVENT, *EVENTS[10:20]], EVENTS[:10]))


def test_loading_holds_one_chunks_lines_at_a_time(monkeypatch):
    """A chunk's first and last lines are kept while it is measured, then only its span: twenty chunks of
    three long lines load in the memory of one."""
    monkeypatch.setattr(format, "MAX_LINE_BYTES", 1 << 20)
    long = lambda t: {"t": float(t), "event": {"type": "status", "event": "a" * 900_000}}  # noqa: E731
    data = members([HEADER, LANES_EVENT, long(100)], *([long(100 + 3 * i + k) for k in range(3)] for i in range(1, 21)))
    assert len(data) < 1 << 20
    peak, _ = _traced(lambda: load(data))
    assert peak < 12 << 20, peak  # (all their lines: 54 MB)


def test_a_bound_crossed_names_the_line_that_crossed_it(monkeypatch):
    monkeypatch.setattr(format, "MAX_BYTES", 1 << 20)
    lines = [json.dumps(HEADER), *([LINES[5]] * 2000)]
    sizes, n = 0, 0
    while sizes <= 1 << 20:
        sizes, n = sizes + len(lines[n].encode()) + 1, n + 1
    with pytest.raises(ValueError, match=f"^line {n}: the recording holds more than"):
        load(recording(*lines))


def test_a_replay_whose_next_chunk_is_due_at_once_and_wrong_is_refused_at_once():
    bad = {"t": json.loads(LANES_EVENT)["t"], "event": without(FIRST["event"], "type")}  # due with the first
    svc = live()
    due = members([{**HEADER, "t0": 1e9}, LANES_EVENT], [bad])
    problem = play_file(svc, due, "due.jsonl.gz")
    assert problem.startswith("Cannot play due.jsonl.gz: line 3: event.type"), problem
    assert svc.replay is None and svc.replay_error is None and source(svc) is svc
    assert play_file(svc, SHIPPED.read_bytes(), "shipped.jsonl.gz") is None
    playing = svc.replay
    assert play_file(svc, due, "due.jsonl.gz").startswith("Cannot play")
    assert svc.replay is playing and playing.active  # the views left as they were
    stop_replay(svc)


def test_a_seek_shows_a_big_chunk_whole():
    """The replay's hub holds its biggest chunk whole: a seek to its end hands the views all of it."""
    many = [json.dumps({"t": 100 + i * 1e-3, "event": {"type": "status", "event": "x"}}) for i in range(25_000)]
    rec = load(recording(HEADER, LANES_EVENT, *many))
    svc = live()
    r = play(svc, rec)
    r.seek(rec.end)
    batch = r.hub.read(0)
    assert batch.skipped == 0 and len(batch.events) == len(rec) == 25_001
    stop_replay(svc)
