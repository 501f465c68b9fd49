"""Lanes in the service and on the wire: any two configurations side by side on one request stream."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import pytest
import websockets

from engine.api.server import create_app
from engine_helpers import greedy, mixed_prompts
from engine.events import FinishedEvent, RequestEvent, StepMessage
from service_helpers import assert_all_free, clean_fixture, make_service, serve, wait_settled
from tiny_models import reference_greedy


@pytest.fixture(scope="module")
def svc(tiny_model_dirs):
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    base = s.cfg
    s.set_lanes({"block 4": base, "block 16": dataclasses.replace(base, block_size=16)})
    wait_settled(s)  # every test starts from these lanes, whichever runs first
    yield s
    s.stop()


_clean = clean_fixture()


def test_lanes_differing_in_block_size_give_identical_greedy_text(svc, tiny_model_dirs):
    wait_settled(svc)
    assert svc.lane_names == ["block 4", "block 16"]
    assert [c.block_size for c in svc.lanes.values()] == [4, 16]
    prompts, max_tokens = mixed_prompts(6)
    refs = reference_greedy(tiny_model_dirs["llama"], prompts, max_tokens)
    handles = [svc.submit(p, greedy(n)) for p, n in zip(prompts, max_tokens)]
    for hs, ref in zip(handles, refs):
        assert [h.lane for h in hs] == ["block 4", "block 16"]
        assert all(h.result(60).output_token_ids == ref for h in hs)
    # the two lanes share one copy of the weights
    models = {id(w.engine.runner.model) for w in svc.workers.values()}
    assert len(models) == 1


def test_events_carry_the_lane(svc):
    cursor = svc.hub.head
    svc.submit([5, 6, 7], greedy(3))[0].result(30)
    assert_all_free(svc)
    items = [item for _, item in svc.hub.read(cursor).events if isinstance(item, (RequestEvent, StepMessage, FinishedEvent))]
    assert {item.lane for item in items} == {"block 4", "block 16"}
    assert {item.strategy for item in items} == {"continuous"}


def test_removing_a_lane_mid_stream_ends_its_requests_at_once_and_loses_nothing(svc):
    base = svc.cfg
    svc.set_lanes({**svc.lanes, "static": dataclasses.replace(base, strategy="static", static_batch_size=2)})
    wait_settled(svc)
    handles, unexpected, stop = [], [], threading.Event()

    def stream():
        i = 0
        while not stop.is_set():
            try:
                handles.append(svc.submit([5 + i % 7] * 6, greedy(12)))
            except ValueError as e:  # a lane that is going away refuses new work: said, not lost
                if "was removed" not in str(e) and "not running" not in str(e):
                    unexpected.append(e)
            i += 1
    t = threading.Thread(target=stream)
    t.start()
    while len(handles) < 6:
        pass
    static = svc.workers["static"]
    svc.set_lanes({"block 4": svc.lanes["block 4"], "block 16": svc.lanes["block 16"]})  # drop "static"
    stop.set()
    t.join(30)
    static.join(10)
    assert not unexpected
    kept = [h.result(60) for hs in handles for h in hs if h.lane != "static"]
    assert kept and all(o.finish_reason == "length" and len(o.output_token_ids) == 12 for o in kept)
    for h in [h for hs in handles for h in hs if h.lane == "static"]:  # ended at once, each told why
        o = h.result(60)
        assert o.finish_reason == "length" or (o.finish_reason == "abort" and "'static' was removed" in o.error)
    assert not static.is_alive()  # and the lane computes nothing more
    assert svc.lane_names == ["block 4", "block 16"]
    assert_all_free(svc)


def test_lane_names_and_configs_are_checked(svc):
    with pytest.raises(ValueError, match="lane name"):
        svc.set_lanes({"<b>": svc.cfg})
    with pytest.raises(ValueError, match="non-empty"):
        svc.set_lanes({})
    with pytest.raises(ValueError, match="lane 'nope' is not running"):
        svc.submit([5], greedy(1), lanes=["nope"])
    assert svc.lane_names == ["block 4", "block 16"]


def test_socket_sets_lanes_and_filters_by_lane(svc, tiny_model_dirs):
    async def main(url):
        async with websockets.connect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"cmd": "lanes", "ref": 1, "lanes": {
                "chunked": {}, "no chunking": {"enable_chunked_prefill": False}}}))
            reply = await _reply(ws)
            assert reply["type"] == "reply", reply
            assert list(reply["status"]["engines"]) == ["chunked", "no chunking"]
            await ws.send(json.dumps({"cmd": "subscribe", "lanes": ["no chunking"], "kv": False}))
            await _reply(ws)
            await ws.send(json.dumps({"cmd": "submit", "prompt": [5] * 40, "params": {"max_tokens": 3}}))
            sub = await _reply(ws)
            assert sub["lanes"] == ["chunked", "no chunking"]
            lanes_seen, finished = set(), 0
            while finished < 1:
                msg = json.loads(await ws.recv())
                for ev in msg.get("events", []):
                    if ev.get("lane"):
                        lanes_seen.add(ev["lane"])
                    finished += ev["type"] == "finished"
            assert lanes_seen == {"no chunking"}
            await ws.send(json.dumps({"cmd": "lanes", "lanes": {"x": {"block_size": 0}}}))
            err = await _reply(ws)
            assert err["type"] == "error" and "EngineConfig.block_size" in err["message"]
            # a lane that fails to start: the command's own answer says which and why, once rolled back
            await ws.send(json.dumps({"cmd": "lanes", "lanes": {
                "chunked": {}, "bad": {"speculative": "draft", "speculative_model": "/usr"}}}))
            err = await _reply(ws)
            assert err["type"] == "error" and err["message"].startswith(
                "lane 'bad' could not start: EngineConfig.speculative_model: model directory '/usr'"), err
            await ws.send(json.dumps({"cmd": "configure", "changes": {"max_num_seqs": 4}}))
            ok = await _reply(ws)
            assert ok["type"] == "reply" and ok["settled"] is True
    with serve(create_app(svc)) as base:
        asyncio.run(asyncio.wait_for(main(f"ws://{base}/engine/ws"), 60))
    assert svc.lanes["no chunking"].enable_chunked_prefill is False and svc.lanes["chunked"].max_num_seqs == 4
    wait_settled(svc)
    svc.configure(max_num_seqs=8)
    svc.set_lanes({"block 4": svc.cfg, "block 16": dataclasses.replace(svc.cfg, block_size=16)})
    wait_settled(svc)


async def _reply(ws) -> dict:
    while True:
        m = json.loads(await ws.recv())
        if m["type"] in ("reply", "error"):
            return m


def set_failing_lane(svc, lanes: dict, name: str) -> None:
    """set_lanes where lane `name` cannot load: a load that fails at once may fail before the call
    returns, which then says so (naming the lane); either way every lane goes back to what ran."""
    try:
        svc.set_lanes(lanes)
    except ValueError as e:
        assert str(e).startswith(f"lane {name!r} could not start"), e


def test_a_lane_that_fails_to_load_goes_and_the_same_name_can_start_or_be_removed(svc):
    good = dict(svc.lanes)
    set_failing_lane(svc, {**good, "broken": {"model": "/nonexistent/model"}}, "broken")
    wait_settled(svc)
    assert svc.lanes == good
    with pytest.raises(ValueError, match="lane 'broken' is not running"):
        svc.submit([5], greedy(1), lanes=["broken"])
    svc.set_lanes({**good, "broken": {}})  # settings that load
    wait_settled(svc)
    assert svc.submit([5, 6], greedy(2), lanes=["broken"])[0].result(30).finish_reason == "length"
    set_failing_lane(svc, {**good, "broken2": {"model": "/nonexistent/model"}}, "broken2")
    svc.set_lanes(good)  # and a lane that never loaded can be removed
    wait_settled(svc)
    assert svc.lane_names == ["block 4", "block 16"]
    for w in svc.workers.values():
        assert w.engine is not None


@pytest.mark.parametrize("lanes, why", [
    ({"block 4": {"model": "/nonexistent/model"}, "added": {"max_num_seqs": 2}},
     "lane 'block 4' could not start: EngineConfig.model: model '/nonexistent/model': no such directory"),
    ({"block 4": {}, "block 16": {"block_size": 16}, "bad": {"speculative": "draft", "speculative_model": "/usr"}},
     "lane 'bad' could not start: EngineConfig.speculative_model: model directory '/usr'"),
    ({"block 4": {}, "block 16": {"block_size": 16}, "bad": {"preemption_mode": "swap", "swap_space_gb": 1024}},
     "lane 'bad' could not start: EngineConfig.swap_space_gb=1024: the host pool would take"),
])
def test_a_lanes_change_that_cannot_start_is_rolled_back_whole_and_says_why(svc, lanes, why):
    """The answer names the lane and the field; every lane is back as it was (a removed one restarted, a
    new one gone), and a viewer's request that names no lane is served on all of them."""
    from engine.room.access import Client
    before = dict(svc.lanes)
    with pytest.raises(ValueError) as failed:
        svc.set_lanes(lanes, wait_s=60)
    assert str(failed.value).startswith(why), failed.value
    wait_settled(svc)
    assert svc.lanes == before
    handles = svc.submit([5, 6], greedy(3), client=Client("ip:10.0.0.9", presenter=False))
    assert [h.lane for h in handles] == list(before) and all(h.result(30).finish_reason == "length" for h in handles)


def test_a_lane_that_could_not_start_is_left_out_of_what_names_no_lane(tiny_model_dirs):
    """At start there is nothing to roll back to: the lane stays, says why in the status, and a request
    that names no lane goes to the others; one that names it is refused without the server's paths."""
    from engine import EngineConfig
    from engine.serving.service import EngineService
    base = EngineConfig(model=str(tiny_model_dirs["llama"]), device="cpu", dtype="float32", block_size=4,
                        num_kv_blocks=64, max_model_len=64)
    svc = EngineService(base, lanes={"ok": {}, "bad": {"model": "/usr"}})
    try:
        svc.workers["ok"].wait_ready(60)
        with pytest.raises(ValueError, match="EngineConfig.model"):
            svc.workers["bad"].wait_ready(60)
        assert "EngineConfig.model: model directory '/usr'" in svc.status()["engines"]["bad"]["error"]
        handles = svc.submit([5, 6], greedy(2))
        assert [h.lane for h in handles] == ["ok"] and handles[0].result(30).finish_reason == "length"
        with pytest.raises(ValueError, match="lane 'bad' is not available: it could not start$"):
            svc.submit([5, 6], greedy(2), lanes=["bad"])
        # a change that fixes it and adds a lane that cannot start goes back to what ran, the broken lane's
        # settings included, and settles there: those failing again roll nothing back again (the lane
        # keeps the engine it had loaded meanwhile)
        with pytest.raises(ValueError, match="lane 'worse' could not start: EngineConfig.speculative_model"):
            svc.set_lanes({"ok": {}, "bad": {}, "worse": {"speculative": "draft", "speculative_model": "/usr"}},
                          wait_s=60)
        assert list(svc.lanes) == ["ok", "bad"] and not svc._configuring and svc._target == svc._committed
        assert svc.configure(wait_s=60, model=base.model)  # reaches the lane that could not start
        assert [h.lane for h in svc.submit([5, 6], greedy(2))] == ["ok", "bad"]
    finally:
        svc.stop()


def test_a_submission_queued_during_a_reconfigure_that_never_runs_is_seen_to_end(svc):
    """Taken while a lane reconfigures, then refused by the new engine (a prompt past its length) or aborted
    before it: its caller was told the lane took it, so the stream says it arrived and ended (a soak's socket
    client once waited for such a request for ever)."""
    cursor, seqs = svc.hub.head, svc.cfg.max_num_seqs
    svc.pause()
    running = svc.submit([5] * 4, greedy(30))
    svc.configure(max_num_seqs=seqs + 1)  # cannot drain while paused
    too_long = svc.submit([7] * 600, greedy(3))  # (past max_model_len: checked by the engine that takes it)
    gone = svc.submit("aborted while queued", greedy(3))
    svc.abort(gone[0].request_id)
    assert all(h.result(30).finish_reason == "abort" for h in gone)
    svc.resume()
    for h in too_long:
        with pytest.raises(ValueError, match="max_model_len"):
            h.result(60)
    assert all(h.result(60).finish_reason == "length" for h in running)
    wait_settled(svc)
    events = [item for _, item in svc.hub.read(cursor).events]
    ended = {(e.lane, e.request_id): e for e in events if isinstance(e, FinishedEvent)}
    arrived = {(e.lane, e.request_id): e for e in events if isinstance(e, RequestEvent)}
    for h in running + too_long + gone:
        assert (h.lane, h.request_id) in arrived and (h.lane, h.request_id) in ended
    assert {ended[h.lane, h.request_id].finish_reason for h in too_long} == {"error"}
    assert all("max_model_len" in ended[h.lane, h.request_id].error for h in too_long)
    assert {arrived[h.lane, h.request_id].num_prompt_tokens for h in too_long} == {600}
    assert {ended[h.lane, h.request_id].finish_reason for h in gone} == {"abort"}
    assert_all_free(svc)
    svc.configure(max_num_seqs=seqs)
    wait_settled(svc)


def test_submissions_during_a_paused_reconfigure_do_not_wait_for_the_drain(svc):
    running = svc.submit([5] * 4, greedy(30))
    svc.pause()
    svc.configure(max_num_seqs=4)  # cannot drain while paused
    t0 = time.monotonic()
    late = svc.submit([6] * 4, greedy(3))
    assert time.monotonic() - t0 < 5
    svc.resume()
    assert all(h.result(60).finish_reason == "length" for h in running + late)
    wait_settled(svc)
    assert all(c.max_num_seqs == 4 for c in svc.lanes.values())
    svc.configure(max_num_seqs=8)
    wait_settled(svc)
