"""The Chrome trace export: structure checks (what Perfetto needs to open it) on hand-built events, on a
recorded run and on a real short run of a tiny model; and GET /trace.json's roles."""
from __future__ import annotations

import json
from collections import defaultdict

import httpx

from engine import SamplingParams
from engine.room.access import PRESENTER_COOKIE, Access
from engine.api.server import create_app
from engine.api.trace_route import hub_trace
from engine.telemetry.trace_export import chrome_trace
from service_helpers import serve, service_fixture, wait_idle
from repo_paths import TESTS

RECORDED = TESTS / "data" / "events_tiny_llama.json"
TOKEN = "presenter-token-trace-1"


def check_structure(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """What a viewer relies on; returns the slices per (pid, tid) track."""
    trace = json.loads(json.dumps(trace))  # JSON all the way
    events = trace["traceEvents"]
    names = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    tracks = defaultdict(list)
    for e in events:
        assert e["ph"] in ("M", "X", "i", "C"), e
        assert e["pid"] in processes
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], int) and e["ts"] >= 0  # whole microseconds
        if e["ph"] in ("X", "i"):
            assert (e["pid"], e["tid"]) in names  # every slice is on a named request track
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0
            tracks[(e["pid"], e["tid"])].append(e)
    for slices in tracks.values():
        starts = [s["ts"] for s in slices]
        assert starts == sorted(starts)  # monotonic per track
        open_ends: list[int] = []
        for s in sorted(slices, key=lambda s: (s["ts"], -s["dur"])):
            while open_ends and open_ends[-1] <= s["ts"]:
                open_ends.pop()
            assert not open_ends or s["ts"] + s["dur"] <= open_ends[-1], f"slices overlap: {s}"  # nest or apart
            open_ends.append(s["ts"] + s["dur"])
    return tracks


def kinds(tracks, pid, tid) -> list[str]:
    return [s["name"] for s in tracks[(pid, tid)]]


def step(n, t0, t1, entries, finished=(), preempted=(), used=4, lane="A", strategy="continuous"):
    return {"type": "step", "lane": lane, "strategy": strategy, "step": n, "t_start": t0, "t_end": t1,
            "entries": [[rid, phase, tok, ctx, 0, 0] for rid, phase, tok, ctx in entries],
            "finished": list(finished), "preempted": list(preempted), "kv": {"used": used}}


def request(rid, t, lane="A", name=None, tag="ui"):
    return {"type": "request", "lane": lane, "strategy": "continuous", "request_id": rid, "tag": tag,
            "name": name, "arrival_s": t}


def finished(rid, t, reason="length", lane="A"):
    return {"type": "finished", "lane": lane, "strategy": "continuous", "request_id": rid,
            "finish_reason": reason, "error": None, "finish_s": t, "num_output_tokens": 3}


def test_chunked_prefill_decode_preemption_and_recompute():
    events = [{"type": "status", "event": "ready", "t": 0.0}, request(1, 0.1, name="Ada"),
              step(0, 0.2, 0.3, [(1, "prefill", 4, 4)]), step(1, 0.3, 0.4, [(1, "prefill", 4, 8)]),
              step(2, 0.4, 0.5, [(1, "decode", 1, 9)]), step(3, 0.5, 0.6, [(1, "decode", 1, 10)]),
              step(4, 0.6, 0.7, [], preempted=[1]), step(5, 0.8, 0.9, [(1, "prefill", 10, 10)]),
              step(6, 0.9, 1.0, [(1, "decode", 1, 11)], finished=[1]), finished(1, 1.0)]
    trace = chrome_trace(events)
    tracks = check_structure(trace)
    assert kinds(tracks, 1, 1) == ["queued", "prefill", "prefill", "decode", "preempted", "recompute", "decode"]
    decode = tracks[(1, 1)][3]
    assert (decode["ts"], decode["dur"]) == (400_000, 200_000)
    assert decode["args"] == {"tokens": 2, "iterations": 2, "first_step": 2, "last_step": 3}
    assert tracks[(1, 1)][4]["ts"] == 600_000 and tracks[(1, 1)][4]["dur"] == 200_000
    meta = {e["name"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] in ("thread_name", "process_name")}
    assert meta == {"process_name": "A (continuous)", "thread_name": "#1 Ada"}
    marks = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert [m["args"]["finish_reason"] for m in marks] == ["length"] and marks[0]["ts"] == 1_000_000
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert {c["name"] for c in counters} == {"batch size", "tokens per step", "KV blocks used"}
    assert len(counters) == 3 * 7


def test_a_disaggregated_lanes_hand_off_is_a_slice_and_each_engine_counts_apart():
    """Prefill and decode steps interleave on one lane: a request's decode iterations on its engine still
    merge, its hand-off (first token to copy) is a slice with the copy's numbers, counters per engine."""
    def part(ev, name, **more):
        return {**ev, "part": name, **more}
    events = [request(1, 0.0), request(2, 0.0),
              part(step(1, 0.1, 0.2, [(1, "prefill", 8, 8)]), "prefill", handed_off=[1]),
              part(step(2, 0.25, 0.3, [(1, "decode", 1, 9)]), "decode", handoffs=[[1, 2, 4096, 0.003]]),
              part(step(3, 0.2, 0.5, [(2, "prefill", 8, 8)]), "prefill"),
              part(step(4, 0.3, 0.35, [(1, "decode", 1, 10)]), "decode", finished=[1]), finished(1, 0.35)]
    trace = chrome_trace(events)
    tracks = check_structure(trace)
    assert kinds(tracks, 1, 1) == ["queued", "prefill", "KV hand-off", "decode"]
    hand_off, decode = tracks[(1, 1)][2:]
    assert (hand_off["ts"], hand_off["dur"]) == (200_000, 50_000)
    assert hand_off["args"] == {"blocks": 2, "bytes": 4096, "copy_ms": 3.0}
    assert decode["args"]["iterations"] == 2  # steps 2 and 4: consecutive on the decode engine
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert "KV blocks used (prefill engine)" in counters and "KV blocks used (decode engine)" in counters


def test_speculative_decoding_counts_on_decode_slices_and_a_counter():
    spec = step(1, 0.2, 0.3, [(1, "decode", 5, 20)])
    spec["entries"][0] += [4, 3]  # drafted, accepted
    again = step(2, 0.3, 0.4, [(1, "decode", 3, 22)])
    again["entries"][0] += [2, 0]
    trace = chrome_trace([request(1, 0.1), spec, again, step(3, 0.4, 0.5, [(1, "decode", 1, 23)]), finished(1, 0.5)])
    decode = [s for s in check_structure(trace)[(1, 1)] if s["name"] == "decode"]
    assert [d["args"] for d in decode] == [{"tokens": 9, "iterations": 3, "first_step": 1, "last_step": 3,
                                            "drafted": 6, "accepted": 3}]
    drafts = [c["args"] for c in trace["traceEvents"] if c["ph"] == "C" and c["name"] == "draft tokens per step"]
    assert drafts == [{"drafted": 4, "accepted": 3}, {"drafted": 2, "accepted": 0}]


def test_static_rows_held_after_finishing_and_a_request_aborted_while_queued():
    s = dict(lane="B", strategy="static")
    events = [request(1, 0.0, lane="B"), request(2, 0.0, lane="B"), request(3, 0.05, lane="B", tag="late"),
              step(0, 0.1, 0.2, [(1, "prefill", 2, 2), (1, "padding", 2, 2), (2, "prefill", 4, 4)], **s),
              step(1, 0.2, 0.3, [(1, "decode", 1, 3), (2, "decode", 1, 5)], finished=[1], **s),
              finished(1, 0.3, lane="B"),
              step(2, 0.3, 0.4, [(1, "padding", 1, 3), (2, "decode", 1, 6)], **s),
              step(3, 0.4, 0.5, [(1, "padding", 1, 3), (2, "decode", 1, 7)], finished=[2], **s),
              finished(2, 0.5, lane="B"), finished(3, 0.45, reason="abort", lane="B")]
    trace = chrome_trace(events)
    tracks = check_structure(trace)
    assert kinds(tracks, 1, 1) == ["queued", "prefill", "decode", "held"]
    held = tracks[(1, 1)][3]
    assert held["args"]["iterations"] == 2 and (held["ts"], held["dur"]) == (300_000, 200_000)
    assert tracks[(1, 1)][1]["args"]["padding"] == 2
    assert kinds(tracks, 1, 3) == ["queued"] and tracks[(1, 3)][0]["dur"] == 400_000  # until its abort
    batch = [e["args"] for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "batch size"]
    assert batch == [{"running": 2, "held": 0}] * 2 + [{"running": 1, "held": 1}] * 2
    tokens = [e["args"] for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "tokens per step"]
    assert tokens[0] == {"prefill": 6, "decode": 0, "padding": 2}


def test_a_window_that_starts_mid_run_still_gives_every_request_a_track():
    events = [step(7, 1.0, 1.1, [(4, "decode", 1, 9)]), request(5, 1.05), step(8, 1.1, 1.2, [(4, "decode", 1, 10)])]
    tracks = check_structure(chrome_trace(events))
    assert kinds(tracks, 1, 4) == ["decode"] and kinds(tracks, 1, 5) == ["queued"]  # still waiting at the end


def test_recorded_run_with_preemption_static_batches_and_coalesced_events():
    recorded = json.loads(RECORDED.read_text())
    events = [e for m in recorded["messages"] if m["type"] == "events" for e in m["events"]]
    trace = chrome_trace(events)
    tracks = check_structure(trace)
    pid = {e["args"]["name"].split(" (")[0]: e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"} == {
        "iteration-level (continuous)", "batch of 3 (static)"}
    seen = {(e["lane"], e["request_id"]) for e in events if e["type"] in ("request", "finished")}
    assert {(pid[lane], rid) for lane, rid in seen} <= set(tracks)
    names = {s["name"] for slices in tracks.values() for s in slices}
    assert {"queued", "prefill", "decode", "preempted", "recompute", "held"} <= names


svc = service_fixture(num_kv_blocks=20, max_model_len=64, access=Access(room=True, token=TOKEN))


def test_real_run_exports_every_request_on_every_lane(svc):
    cursor = svc.hub.head
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    rids = [svc.submit(f"prompt number {i} " * (1 + i % 3), params, tag="t", name=f"P{i}")[0].request_id
            for i in range(6)]
    wait_idle(svc)
    assert svc.hub.read(cursor).skipped == 0
    trace = hub_trace(svc.hub)
    tracks = check_structure(trace)
    for pid in (1, 2):
        for rid in rids:
            assert (pid, rid) in tracks and kinds(tracks, pid, rid)[0] == "queued"
            assert "decode" in kinds(tracks, pid, rid)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {f"#{rid} P{i}" for i, rid in enumerate(rids)} <= names
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert counters == {"batch size", "tokens per step", "KV blocks used"}


def test_trace_route_is_the_presenters_in_a_room(svc):
    with serve(create_app(svc)) as addr:
        url = f"http://{addr}/trace.json"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer guess"}).status_code == 401
        by_cookie = httpx.get(url, cookies={PRESENTER_COOKIE: TOKEN})
        assert by_cookie.status_code == 200 and "attachment" in by_cookie.headers["content-disposition"]
        check_structure(by_cookie.json())
        assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert httpx.get(url, headers={"Origin": "https://evil.example"}).status_code == 403
