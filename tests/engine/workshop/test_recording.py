"""Record -> replay: the same events in the same order, paced by the recording scaled by the speed;
pause, seek; /engine/ws serving a replay instead of the engines."""
from __future__ import annotations

import gzip
import json
import time

import pytest
import websockets

from engine import SamplingParams
from engine.api.server import create_app
from engine.kv_wire import is_key
from engine.workshop.recording import Recording, Replayer, load, play, start_recording, stop_recording, stop_replay
from engine.workshop.recording.format import FORMAT, VERSION
from engine.workshop.recording.stage import SHIPPED
from scheduler_helpers import FakeClock
from engine_helpers import whole_kv
from service_helpers import recv_until, run, serve, service_fixture, wait_idle


svc = service_fixture()


@pytest.fixture(scope="module")
def recorded(svc, tmp_path_factory):
    """A recording of two requests on both lanes, and what the hub published meanwhile (steps with their
    KV tables whole)."""
    path = tmp_path_factory.mktemp("rec") / "run.jsonl.gz"
    cursor = svc.hub.head
    start_recording(svc, path)
    for prompt in ([5, 6, 7], "hello there"):
        svc.submit(prompt, SamplingParams(max_tokens=5, ignore_eos=True))
    wait_idle(svc)
    stop_recording(svc)
    published = [item.key_wire() if item.TYPE == "step" else item.wire() for _, item in svc.hub.read(cursor).events]
    return load(path), published


def test_a_recording_holds_every_event_in_publishing_order(svc, recorded):
    rec, published = recorded
    assert rec.header["model"] == svc.cfg.model and rec.lanes == ["continuous", "dynamic"]
    assert rec.header["status"]["engines"].keys() == {"continuous", "dynamic"}
    first, *rest = [e for _, e in rec.events]
    assert first["type"] == "lanes" and list(first["lanes"]) == rec.lanes  # a replay knows its lanes
    steps = [e for e in rest if e["type"] == "step"]
    assert all(is_key(next(e for e in steps if e["lane"] == lane)["kv"]) for lane in rec.lanes)
    assert not all(is_key(e["kv"]) for e in steps)  # then the changes only
    assert whole_kv(rest) == json.loads(json.dumps(published))
    assert {e["type"] for e in rest} >= {"request", "step", "finished"}
    times = [t for t, _ in rec.events]
    assert times == sorted(times) and rec.start <= times[0]


def test_replay_publishes_the_same_events_at_the_recorded_pacing_scaled_by_speed(recorded):
    rec, _ = recorded
    clock = FakeClock(100.0)
    r = Replayer(rec, speed=2.0, clock=clock)
    for t, _ in rec.events:  # each event comes out once the playhead reaches its time, not before
        clock.t = 100.0 + (t - rec.start) / 2.0 + 1e-9
        r.pump()
        assert len(r.hub) == sum(1 for t2, _ in rec.events if t2 <= t)
    assert [i.wire() for _, i in r.hub.read(0).events] == [e for _, e in rec.events]
    before = Replayer(rec, speed=2.0, clock=clock)
    clock.t = before._base_wall + (rec.events[-1][0] - rec.start) / 2.0 - 1e-3  # just before the last
    before.pump()
    assert len(before.hub) == len([t for t, _ in rec.events if t <= rec.events[-1][0] - 2e-3]) < len(rec.events)


def synthetic(n: int = 10) -> Recording:
    """Events one second apart from t=0 (the header as the recorder writes it)."""
    header = {"model": "m", "device": "CPU, 2 cores", "started_at": "2026-11-22T10:00:00+00:00", "t0": 0.0,
              "lanes": {"a": {"strategy": "continuous"}}, "status": {"engines": {"a": {"max_model_len": 64}}}}
    lines = [{"format": FORMAT, "version": VERSION, **header}]
    lines += [{"t": float(i), "event": {"type": "status", "lane": "a", "event": f"e{i}", "t": float(i)}} for i in range(n)]
    return load(gzip.compress("\n".join(json.dumps(x) for x in lines).encode()))


def published(r: Replayer) -> list[str]:
    return [item.wire()["event"] for _, item in r.hub.read(0).events]


def test_pause_freezes_the_playhead_and_resume_goes_on_from_there():
    clock = FakeClock(100.0)
    r = Replayer(synthetic(), clock=clock)
    clock.t += 2.5
    r.pump()
    assert published(r) == ["e0", "e1", "e2"]
    r.pause()
    clock.t += 5
    r.pump()
    assert r.position() == 2.5 and published(r) == ["e0", "e1", "e2", "paused"]
    r.resume()
    r.set_speed(4.0)
    clock.t += 0.25  # one recorded second at 4x
    r.pump()
    assert r.position() == 3.5 and published(r)[-2:] == ["replay_speed", "e3"]
    with pytest.raises(ValueError, match="between 0.25x and 4.0x"):
        r.set_speed(8)


def test_seek_rebuilds_the_hub_up_to_that_time():
    clock = FakeClock(100.0)
    r = Replayer(synthetic(), clock=clock)
    clock.t += 6
    r.pump()
    old = r.hub
    r.seek(2.0)  # back: a fresh hub holding exactly what happened until then
    assert r.hub is not old and published(r) == ["e0", "e1", "e2"] and r.position() == 2.0
    r.seek(7.5)  # forward, at once
    assert published(r)[-1] == "e7" and len(published(r)) == 8
    r.seek(99)
    assert r.ended and r.position() == 9.0 and r.info()["label"].startswith("Recording of a real run: m, 2026-11-22")


def test_the_shipped_recording_is_a_real_run_of_the_default_model():
    rec = load(SHIPPED)
    assert rec.header["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and rec.lanes == ["continuous", "static"]
    assert SHIPPED.stat().st_size < 1_000_000 and rec.end - rec.start <= 70
    finished = [e for _, e in rec.events if e["type"] == "finished"]
    assert len(finished) == 32 and {e["finish_reason"] for e in finished} == {"length"}


def test_the_socket_serves_a_replay_then_the_engines_again(svc, recorded):
    rec, _ = recorded

    async def main(url):
        async with websockets.connect(url) as ws:
            hello = json.loads(await ws.recv())
            assert hello["status"]["replay"]["label"].startswith("Recording of a real run")
            assert hello["status"]["engines"]["dynamic"]["ready"]
            await ws.send(json.dumps({"cmd": "subscribe", "ref": "s", "from_seq": "oldest"}))
            await recv_until(ws, lambda m: m.get("ref") == "s")  # what came before is from the connect-time cursor
            events = []
            while len(events) < len(rec.events):
                msg = json.loads(await ws.recv())
                events += msg.get("events", [])
            assert events == [e for _, e in rec.events]
            await ws.send(json.dumps({"cmd": "submit", "ref": "x", "prompt": "hi"}))
            refused = json.loads(await ws.recv())
            assert refused["type"] == "error" and "recording is playing" in refused["message"]
            await ws.send(json.dumps({"cmd": "pause", "ref": "p"}))
            msg, _ = await recv_until(ws, lambda m: m["type"] == "reply")
            assert msg["status"]["paused"] and msg["status"]["replay"]["paused"] and not svc.paused.is_set()
            svc.replay.seek(rec.start)  # a seek closes the socket: the client rebuilds from the new hub
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await ws.recv()
            assert closed.value.rcvd.code == 1012
        stop_replay(svc)
        async with websockets.connect(url) as ws:
            assert "replay" not in json.loads(await ws.recv())["status"]

    play(svc, rec, speed=4.0)
    with serve(create_app(svc)) as base:
        run(main(f"ws://{base}/engine/ws"))
    assert svc.replay is None


def test_the_cli_records_a_scenarios_stream_on_its_lanes(tiny_model_dirs, tmp_path, capsys):
    from engine.workshop.recording.__main__ import main
    out = tmp_path / "cli.jsonl.gz"
    assert main(["record", "--scenario", "Burst: max batch 4 vs 32", "--out", str(out), "--model",
                 str(tiny_model_dirs["llama"]), "--device", "cpu", "--dtype", "float32"]) == 0
    rec = load(out)
    assert rec.lanes == ["max batch 4", "max batch 32"] and rec.events[0][1]["type"] == "lanes"
    finished = [e for _, e in rec.events if e["type"] == "finished"]
    assert len(finished) == 32 and {e["finish_reason"] for e in finished} == {"length"}  # 16 on each lane
    assert main(["info", str(out)]) == 0 and "lanes: max batch 4, max batch 32" in capsys.readouterr().out


def test_a_recording_stops_itself_before_a_reader_would_refuse_it(svc, tmp_path, monkeypatch):
    from engine.workshop.recording import format as format_module
    monkeypatch.setattr(format_module, "MAX_BYTES", 30_000)
    monkeypatch.setattr(format_module, "MAX_LINE_BYTES", 10_000)  # (the header, with the service's status, is long)
    rec = start_recording(svc, tmp_path / "full.jsonl.gz")
    for _ in range(4):
        svc.submit("hello there", SamplingParams(max_tokens=8, ignore_eos=True))
    wait_idle(svc)
    deadline = time.monotonic() + 10
    while rec.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rec.full and not rec.active and 0 < rec.events
    path = stop_recording(svc)
    assert len(load(path)) == rec.events  # its lanes event first, then each event it wrote


def test_a_long_recording_is_chunks_that_each_play_from_their_start(svc, tmp_path, monkeypatch):
    """Past CHUNK_BYTES the recorder starts a gzip member that opens with the lanes and each KV pool's tables
    whole: the chunks read back as the events published, and a seek into one shows it from its start."""
    from engine.workshop.recording import format as format_module
    monkeypatch.setattr(format_module, "CHUNK_BYTES", 3_000)
    path = tmp_path / "chunked.jsonl.gz"
    cursor = svc.hub.head
    start_recording(svc, path)
    for prompt in ([5, 6, 7], "hello there", [8, 9]):
        svc.submit(prompt, SamplingParams(max_tokens=6, ignore_eos=True))
    wait_idle(svc)
    stop_recording(svc)
    published = [item.key_wire() if item.TYPE == "step" else item.wire() for _, item in svc.hub.read(cursor).events]
    rec = load(path)
    assert len(rec.chunks) >= 3 and len(gzip.decompress(path.read_bytes()).splitlines()) == len(rec) + 1
    recorded = [e for _, e in rec.events if e["type"] != "lanes"]
    assert whole_kv(recorded) == json.loads(json.dumps(published))
    stepped = 0
    for i in range(len(rec.chunks)):
        events = [json.loads(x) for x in rec.chunk(i).texts]
        assert events[0]["type"] == "lanes" and list(events[0]["lanes"]) == rec.lanes
        firsts = {}
        for e in events:
            if e["type"] == "step":
                firsts.setdefault(e["lane"], e)
        assert all(is_key(e["kv"]) for e in firsts.values()), i  # each pool's first step: a key frame
        stepped += bool(firsts)
    assert stepped >= 2
    clock = FakeClock(100.0)
    r = Replayer(rec, clock=clock)
    k = len(rec.chunks) - 1
    r.seek(rec.chunks[k].t1)
    assert [item.wire() for _, item in r.hub.read(0).events] == [json.loads(x) for x in rec.chunk(k).texts]
    assert r.ended
    r.seek(rec.start)
    clock.t += rec.end - rec.start + 1
    r.pump()  # across every chunk, in order
    assert [item.wire() for _, item in r.hub.read(0).events] == [e for _, e in rec.events]
