"""/engine/ws: commands in, ordered events out, errors on bad messages, cleanup on disconnect."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest
import websockets

from engine.events import ENTRY_FIELDS, PHASES, FinishedEvent, GpuEvent, RequestEvent, StepRows, full_entries
from engine_helpers import whole_kv
from service_helpers import app_fixture, assert_all_free, recv_until, run, service_fixture


svc = service_fixture()
url = app_fixture("url", "ws://{}/engine/ws")


@pytest.fixture(autouse=True)
def _clean(svc):
    yield
    svc.resume()
    assert_all_free(svc)


def test_submit_streams_tokens_and_steps_in_order(url):
    async def main():
        async with websockets.connect(url) as ws:
            hello = json.loads(await ws.recv())
            assert hello["type"] == "hello" and set(hello["status"]["engines"]) == {"continuous", "dynamic"}
            await ws.send(json.dumps({"cmd": "submit", "prompt": [5, 6, 7], "ref": "a",
                                      "params": {"max_tokens": 6, "ignore_eos": True}}))
            reply, _ = await recv_until(ws, lambda m: m["type"] == "reply")
            assert reply["ref"] == "a" and reply["lanes"] == ["continuous", "dynamic"]
            rid = reply["request_id"]
            finished, texts, seqs, steps = set(), {"continuous": "", "dynamic": ""}, [], {}
            while len(finished) < 2:
                msg = json.loads(await ws.recv())
                if msg["type"] != "events":
                    continue
                seqs.append((msg["first_seq"], msg["last_seq"], msg["skipped"]))
                for ev in msg["events"]:
                    if ev["type"] == "step":
                        steps.setdefault(ev["strategy"], []).append(ev["step"])
                        texts[ev["strategy"]] += ev["deltas"].get(str(rid), "")
                    elif ev["type"] == "finished" and ev["request_id"] == rid:
                        finished.add(ev["strategy"])
                        assert ev["num_output_tokens"] == 6
                        assert texts[ev["strategy"]] == ev["text"]
            # sequence numbers increase without gaps (nothing was coalesced here)
            for (a0, a1, skipped), (b0, _, _) in zip(seqs, seqs[1:]):
                assert a0 <= a1 and b0 == a1 + 1 and skipped == 0
            for s, nums in steps.items():
                assert nums == sorted(nums) and len(set(nums)) == len(nums), s
    run(main())


def one_short_request(url) -> list[dict]:
    """Submit "hi" (2 tokens) to the continuous engine; the events received until it finished."""
    async def main():
        async with websockets.connect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"cmd": "submit", "prompt": "hi", "lanes": ["continuous"],
                                      "params": {"max_tokens": 2}}))
            _, seen = await recv_until(ws, lambda m: m["type"] == "events" and any(
                e["type"] == "finished" for e in m["events"]))
            return [e for m in seen if m["type"] == "events" for e in m["events"]]
    return run(main())


def test_step_event_shape(url):
    ev = next(e for e in one_short_request(url) if e["type"] == "step")
    for key in ("step", "strategy", "t_start", "t_end", "entries", "num_waiting", "num_running",
                "admitted", "finished", "preempted", "tokens_used", "token_budget", "kv", "deltas"):
        assert key in ev
    kv = ev["kv"]
    # tables, not a per-block owner list: the event's size follows the blocks in use, not the pool
    assert "block_owner" not in kv and kv["used"] >= 1
    assert sum(len(t) for t in kv["block_tables"].values()) == kv["used"]


def test_a_client_that_joins_mid_stream_folds_the_engines_tables(url, svc):
    """Step events send only the KV changes since their engine's previous step; a client that connects
    while a request runs gets each lane's tables whole first, and folding what it gets yields the
    engines' tables at every step."""
    def steps_seen(msgs):
        return [e for m in msgs if m["type"] == "events" for e in m["events"] if e["type"] == "step"]

    async def main():
        cursor = svc.hub.head
        async with websockets.connect(url) as first:
            await first.recv()
            await first.send(json.dumps({"cmd": "submit", "prompt": [5, 6, 7], "ref": "a",
                                         "params": {"max_tokens": 24, "ignore_eos": True}}))
            reply, seen = await recv_until(first, lambda m: m["type"] == "reply")
            await recv_until(first, lambda m: len(steps_seen([m])) > 0)
            async with websockets.connect(url) as late:
                await late.recv()
                ended = set()
                _, got = await recv_until(late, lambda m: ended.update(
                    e["lane"] for e in m.get("events", []) if e["type"] == "finished") or len(ended) == 2)
        return steps_seen(got), cursor

    svc.set_slow_motion(0.02)  # steps every 20 ms at least: the request outlasts the late client's connecting
    try:
        steps, cursor = run(main())
    finally:
        svc.set_slow_motion(0.0)
    truth = {(m.lane, m.event.step): m.key_wire()["kv"] for _, m in svc.hub.read(cursor).events if m.TYPE == "step"}
    for lane in ("continuous", "dynamic"):
        mine = [e for e in steps if e["lane"] == lane]
        assert mine and "block_tables" in mine[0]["kv"], f"{lane}: a key frame first"
        assert any("tables" in e["kv"] for e in mine), f"{lane}: then the changes only"
    for e in whole_kv(steps):
        assert e["kv"] == truth[e["lane"], e["step"]], (e["lane"], e["step"])


def test_a_client_that_stopped_reading_goes_on_from_the_newest_event(url, svc, monkeypatch):
    """A client over the backlog bound is sent nothing. Over it briefly (a burst it is taking), it then gets
    every event; over it for SKIP_AFTER_S or more, once it reads again it is told how many events it missed
    and goes on from the newest one (not through the backlog), each lane's KV tables whole first."""
    from engine.api import ws as ws_module
    stalled = {"on": False}
    monkeypatch.setattr(ws_module._Connection, "_backlogged", lambda self: stalled["on"])

    async def main():
        async with websockets.connect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"cmd": "submit", "prompt": [5, 6, 7], "ref": "a",
                                      "params": {"max_tokens": 90, "ignore_eos": True}}))
            first, _ = await recv_until(ws, lambda m: m["type"] == "events" and any(
                e["type"] == "step" for e in m["events"]))
            stalled["on"], head = True, svc.hub.head  # a burst: over the bound for 0.2 s
            await asyncio.sleep(0.2)
            stalled["on"] = False
            _, burst = await recv_until(ws, lambda m: m["type"] == "events" and m["last_seq"] >= head + 2)
            seqs = [(m["first_seq"], m["last_seq"], m["skipped"]) for m in [first, *burst] if m["type"] == "events"]
            assert all(b0 == a1 + 1 and skipped == 0 for (_, a1, _), (b0, _, skipped) in zip(seqs, seqs[1:])), seqs
            stalled["on"], t0 = True, time.monotonic()
            while time.monotonic() - t0 < ws_module.SKIP_AFTER_S + 0.1:  # steps the client misses
                await asyncio.sleep(0.02)
            stalled["on"] = False
            gap, _ = await recv_until(ws, lambda m: m["type"] == "events" and m["skipped"] > 0)
            ended = set()
            _, after = await recv_until(ws, lambda m: ended.update(
                e["lane"] for e in m.get("events", []) if e["type"] == "finished") or len(ended) == 2)
        return gap, [e for m in after if m["type"] == "events" for e in m["events"] if e["type"] == "step"]

    svc.set_slow_motion(0.04)  # a step at least every 40 ms: the request outlasts the stall
    try:
        gap, steps = run(main())
    finally:
        svc.set_slow_motion(0.0)
    assert gap["events"] == [] and gap["skipped"] >= 6
    for lane in ("continuous", "dynamic"):
        mine = [e for e in steps if e["lane"] == lane]
        assert mine and "block_tables" in mine[0]["kv"], lane


def test_events_on_the_socket_follow_the_contract(url):
    """request and finished carry their dataclass's fields; step entries are ENTRY_FIELDS-ordered lists."""
    events = one_short_request(url)
    by_type = {e["type"]: e for e in events}
    for cls in (RequestEvent, FinishedEvent):
        every = {"type"} | {f.name for f in dataclasses.fields(cls)}
        assert every - set(cls.OPTIONAL) <= set(by_type[cls.TYPE]) <= every  # optional ones go while None
    rows = StepRows()  # (each pool's first step comes whole, the rows that go on after it as runs)
    steps = [rows.resolve(ev) for ev in events if ev["type"] == "step"]
    entries = [dict(zip(ENTRY_FIELDS, e)) for ev in steps for e in full_entries(ev["entries"])]
    assert entries and all(len(e) == len(ENTRY_FIELDS) and e["phase"] in PHASES for e in entries)
    assert {e["request_id"] for e in entries} == {by_type["request"]["request_id"]}


@pytest.mark.parametrize("message,error", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"cmd": "explode"}', "unknown cmd"),
    ('{"cmd": "submit", "prompt": "hi", "params": {"max_tokens": "ten"}}', "max_tokens"),
    ('{"cmd": "submit", "prompt": "hi", "params": {"warp": 9}}', "unknown sampling parameter"),
    ('{"cmd": "submit", "prompt": ""}', "prompt is empty"),
    ('{"cmd": "submit", "prompt": [5], "params": {"max_tokens": 500}}', "max_model_len"),
    ('{"cmd": "submit", "prompt": "hi", "priority": 1.5}', "priority must be an integer"),
    ('{"cmd": "submit", "prompt": "hi", "tenant": ""}', "tenant must be a string"),
    ('{"cmd": "abort", "request_id": "x"}', "integer request_id"),
    ('{"cmd": "configure", "changes": {"block_size": -3}}', "EngineConfig.block_size"),
    ('{"cmd": "slow_motion", "interval_s": "slow"}', "slow motion"),
    ('{"cmd": "subscribe", "lanes": "all"}', "lanes must be a list"),
    ("x" * (64 * 1024 + 1), "64 KiB"),
])
def test_bad_messages_get_errors_and_connection_survives(url, message, error):
    async def main():
        async with websockets.connect(url, max_size=2**22) as ws:
            await ws.recv()
            await ws.send(message)
            msg, _ = await recv_until(ws, lambda m: m["type"] in ("error", "reply"))
            assert msg["type"] == "error" and error in msg["message"]
            await ws.send(json.dumps({"cmd": "status", "ref": 2}))
            msg, _ = await recv_until(ws, lambda m: m["type"] == "reply")
            assert msg["ref"] == 2
    run(main())


def test_disconnect_mid_stream_aborts_and_frees(url, svc):
    async def main():
        async with websockets.connect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"cmd": "submit", "prompt": [5] * 30,
                                      "params": {"max_tokens": 90, "ignore_eos": True}}))
            await recv_until(ws, lambda m: m["type"] == "events" and any(
                e["type"] == "step" for e in m["events"]))
        # socket closed while the request still runs
    run(main())
    assert_all_free(svc)  # aborted (not run to 90 tokens) and every block freed


def test_subscribe_filters_lanes_and_pause_commands(url, svc):
    async def main():
        async with websockets.connect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"cmd": "subscribe", "lanes": ["dynamic"], "kv": False}))
            await recv_until(ws, lambda m: m["type"] == "reply")
            await ws.send(json.dumps({"cmd": "pause"}))
            reply, _ = await recv_until(ws, lambda m: m["type"] == "reply")
            assert reply["status"]["paused"] is True
            await ws.send(json.dumps({"cmd": "submit", "prompt": [5, 6], "params": {"max_tokens": 3}}))
            await recv_until(ws, lambda m: m["type"] == "reply")
            await ws.send(json.dumps({"cmd": "resume"}))
            done = set()
            while "dynamic" not in done:
                msg = json.loads(await ws.recv())
                for ev in msg.get("events", []):
                    assert ev.get("strategy") in ("dynamic", None) or ev["type"] == "status"
                    if ev["type"] == "step":
                        assert "kv" not in ev
                    if ev["type"] == "finished":
                        done.add(ev["strategy"])
    run(main())
    time.sleep(0.1)


def test_gpu_samples_reach_every_subscriber(svc, url):
    """NVML samples (published beside the engines on a GPU) go to clients whatever their lanes."""
    async def main():
        async with websockets.connect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"cmd": "subscribe", "lanes": ["continuous"], "ref": "s"}))
            await recv_until(ws, lambda m: m["type"] == "reply")
            svc.hub.publish(GpuEvent(t=svc.clock(), util_pct=73, mem_used_mb=40960.0, mem_total_mb=81920.0))
            msg, _ = await recv_until(ws, lambda m: m["type"] == "events" and any(
                e["type"] == "gpu" for e in m["events"]))
            ev = next(e for e in msg["events"] if e["type"] == "gpu")
            assert ev["util_pct"] == 73 and ev["mem_total_mb"] == 81920.0
    run(main())
