"""Safe in front of a room: roles, origins, content types, limits, and the faults found by probing.

A service in room mode (as when the server listens beyond loopback) on a tiny model; the loopback
default is covered by the other service, socket and API tests, which run without any token."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import time
import tomllib
import weakref

import httpx
import psutil
import pytest
import websockets

from engine import SamplingParams
from engine.events import FinishedEvent, RequestEvent
from engine.room.access import Access, Client, is_loopback
from engine.api import ws as ws_module
from engine.api.server import create_app
from engine.room.limits import ClientLimits
from repo_paths import ROOT
from service_helpers import (app_fixture, clean_fixture, make_service, run, serve, service_fixture,
                             wait_idle, wait_settled)

TOKEN, API_KEY = "presenter-token-123", "audience-key-456"
LIMITS = ClientLimits(burst=3, per_minute=60, max_in_flight=2, max_tokens=40)
CONTROL = [{"cmd": "pause"}, {"cmd": "resume"}, {"cmd": "step"}, {"cmd": "slow_motion", "interval_s": 5},
           {"cmd": "configure", "changes": {"num_kv_blocks": 1}},
           {"cmd": "lanes", "lanes": {"mine": {"remote": "http://elsewhere.example/v1", "model": "m"}}},
           {"cmd": "scenario", "number": 2}]


svc = service_fixture(access=Access(room=True, token=TOKEN, api_key=API_KEY, origins=frozenset({"https://slides.example"})),
                      limits=LIMITS)
base = app_fixture("base", "{}")


_clean = clean_fixture(LIMITS)


async def command(ws, msg: dict) -> dict:
    """Send one command; return its reply or error (events in between are skipped)."""
    await ws.send(json.dumps(msg))
    while True:
        m = json.loads(await ws.recv())
        if m["type"] in ("reply", "error"):
            return m


def greedy(n):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


# ---- roles ---------------------------------------------------------------------------------------
def test_room_mode_follows_the_listening_address():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not any(is_loopback(a) for a in ("0.0.0.0", "::", "", "192.168.1.20", "myhost"))
    assert not Access.from_env("127.0.0.1", environ={}).room
    assert Access.from_env("0.0.0.0", environ={}).room
    assert Access.from_env("127.0.0.1", environ={"INFLIGHT_ROOM": "1"}).room
    a, b = Access.from_env("0.0.0.0", environ={}), Access.from_env("0.0.0.0", environ={})
    assert a.token != b.token and len(a.token) >= 20  # random per start
    assert Access.from_env("0.0.0.0", environ={"INFLIGHT_TOKEN": "a-chosen-token-1234"}).token == "a-chosen-token-1234"


def test_viewer_is_refused_every_control_command_then_auth_unlocks(base, svc):
    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws") as ws:
            hello = json.loads(await ws.recv())
            assert hello["role"] == "viewer" and hello["room"] is True
            for msg in CONTROL:
                err = await command(ws, msg)
                assert err["type"] == "error" and "for the presenter" in err["message"], msg
            assert not svc.paused.is_set() and svc.min_interval_s == 0 and svc.cfg.num_kv_blocks == 256
            assert "mine" not in svc.lane_names  # no remote lane pointed anywhere by a viewer
            assert svc.lane_names == ["continuous", "dynamic"]  # nor a scenario's lanes
            err = await command(ws, {"cmd": "auth", "token": "guess"})
            assert err["type"] == "error" and "wrong presenter token" in err["message"]
            ok = await command(ws, {"cmd": "auth", "token": TOKEN})
            assert ok["type"] == "reply" and ok["role"] == "presenter"
            ok = await command(ws, {"cmd": "pause"})
            assert ok["type"] == "reply" and ok["status"]["paused"] is True
            await command(ws, {"cmd": "resume"})
    run(main())


def test_presenter_starts_a_scenario_by_number(base, svc):
    """The keyboard's 1-9: the n-th scenario's lanes run, then its stream reaches them."""
    from engine.workshop.scenarios.catalog import by_number
    scenario = by_number(2)

    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws?token={TOKEN}") as ws:
            await ws.recv()
            err = await command(ws, {"cmd": "scenario", "number": 99})
            assert err["type"] == "error" and "from 1 to" in err["message"]
            ok = await command(ws, {"cmd": "scenario", "number": 2})
            assert ok["type"] == "reply" and ok["cmd"] == "scenario"
    cursor = svc.hub.head
    run(main())
    assert svc.lane_names == list(scenario.lanes)
    deadline = time.monotonic() + 30
    while len([e for _, e in svc.hub.read(cursor).events if isinstance(e, FinishedEvent)]) < 2 * len(scenario.arrivals):
        assert time.monotonic() < deadline, "the scenario's requests did not all finish"
        time.sleep(0.05)
    svc.set_lanes({"continuous": {"strategy": "continuous"}, "dynamic": {"strategy": "dynamic"}})
    wait_settled(svc)


def test_token_in_the_socket_url_or_presenter_cookie(base, svc):
    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws?token={TOKEN}") as ws:
            assert json.loads(await ws.recv())["role"] == "presenter"
        r = httpx.get(f"http://{base}/presenter", params={"token": TOKEN}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        async with websockets.connect(f"ws://{base}/engine/ws",
                                      additional_headers={"Cookie": cookie.split(";")[0]}) as ws:
            assert json.loads(await ws.recv())["role"] == "presenter"
    run(main())
    assert httpx.get(f"http://{base}/presenter", params={"token": "nope"}).status_code == 403


def test_viewer_aborts_only_its_own_requests(base, svc):
    other = svc.submit([5] * 8, greedy(60))  # the presenter's (in-process) request
    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws") as ws:
            await ws.recv()
            err = await command(ws, {"cmd": "abort", "request_id": other[0].request_id})
            assert err["type"] == "error" and "for the presenter" in err["message"]
            mine = await command(ws, {"cmd": "submit", "prompt": [5, 6], "params": {"max_tokens": 30,
                                                                                   "ignore_eos": True}})
            ok = await command(ws, {"cmd": "abort", "request_id": mine["request_id"]})
            assert ok["type"] == "reply"
    run(main())
    assert all(h.result(30).finish_reason == "length" for h in other)


def test_viewer_submissions_are_limited_and_others_keep_being_served(base, svc):
    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws") as ws:
            await ws.recv()
            err = await command(ws, {"cmd": "submit", "prompt": [5], "params": {"max_tokens": 41}})
            assert err["type"] == "error" and "limited to 40" in err["message"]
            svc.pause()  # keep the first two in flight
            for _ in range(2):
                assert (await command(ws, {"cmd": "submit", "prompt": [5], "params": {"max_tokens": 5}}))["type"] == "reply"
            err = await command(ws, {"cmd": "submit", "prompt": [5], "params": {"max_tokens": 5}})
            assert err["type"] == "error" and "still running" in err["message"]
            # the presenter is not limited
            assert len(svc.submit([7], greedy(3))) == 2
            svc.resume()
            await asyncio.sleep(0.5)
            err = await command(ws, {"cmd": "submit", "prompt": [5], "params": {"max_tokens": 5}})
            assert err["type"] == "reply"  # burst of 3 used, in-flight back under the cap
            err = await command(ws, {"cmd": "submit", "prompt": [5], "params": {"max_tokens": 5}})
            assert err["type"] == "error" and "too many submissions" in err["message"]
    run(main())
    wait_idle(svc)


# ---- origins and content types -------------------------------------------------------------------
@pytest.mark.parametrize("origin,ok", [("http://evil.example", False), ("null", False),
                                       ("http://{base}", True), ("https://slides.example", True), (None, True)])
def test_socket_checks_origin(base, origin, ok):
    async def main():
        headers = {} if origin is None else {"Origin": origin.format(base=base)}
        async with websockets.connect(f"ws://{base}/engine/ws", origin=None, additional_headers=headers) as ws:
            return json.loads(await ws.recv())["type"]
    if ok:
        assert run(main()) == "hello"
    else:
        with pytest.raises(websockets.exceptions.InvalidStatus, match="403"):
            run(main())


def test_api_refuses_wrong_content_type_foreign_origin_and_missing_key(base):
    url = f"http://{base}/v1/chat/completions"
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    auth = {"Authorization": f"Bearer {API_KEY}"}
    r = httpx.post(url, content=body, headers={**auth, "Content-Type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    r = httpx.post(url, content=body, headers={**auth, "Content-Type": "application/json",
                                                "Origin": "http://evil.example"})
    assert r.status_code == 403
    r = httpx.post(url, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 401 and "bearer" in r.json()["error"]["message"].lower()
    assert httpx.get(f"http://{base}/v1/models").status_code == 401
    for key in (API_KEY, TOKEN):
        r = httpx.post(url, content=body, headers={"Authorization": f"Bearer {key}",
                                                   "Content-Type": "application/json"})
        assert r.status_code == 200, r.text


def test_api_key_holders_are_limited(base, svc):
    r = httpx.post(f"http://{base}/v1/completions", json={"prompt": "hi", "max_tokens": 400},
                   headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 429 and "limited to 40" in r.json()["error"]["message"]
    r = httpx.post(f"http://{base}/v1/completions", json={"prompt": "hi", "max_tokens": 400},
                   headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400 and "max_model_len" in r.json()["error"]["message"]  # not limited: the engine's own check


def request_events(svc, since: int, request_id: int) -> list[RequestEvent]:
    return [item for _, item in svc.hub.read(since).events
            if isinstance(item, RequestEvent) and item.request_id == request_id]


def test_viewer_cannot_jump_the_queue_nor_pose_as_another_tenant_and_nobody_sees_its_address(base, svc):
    """A viewer's requests carry its label, which its hello tells it; no event any socket gets (nor the
    hub, which recordings copy) names its address."""
    since = svc.hub.head
    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws") as other, \
                websockets.connect(f"ws://{base}/engine/ws") as ws:
            await other.recv()
            hello = json.loads(await ws.recv())
            err = await command(ws, {"cmd": "submit", "prompt": [5], "priority": -1})
            assert err["type"] == "error" and "priority better than 0" in err["message"]
            ok = await command(ws, {"cmd": "submit", "prompt": [5], "params": {"max_tokens": 2},
                                    "priority": 3, "tenant": "the-presenter"})
            seen_by_other = ""
            while '"finished"' not in seen_by_other:
                seen_by_other += await asyncio.wait_for(other.recv(), 30)
            return hello, ok["request_id"], seen_by_other
    hello, rid, seen_by_other = run(main())
    wait_idle(svc)
    seen = request_events(svc, since, rid)
    label = svc.access.tenant_of("ip:127.0.0.1")
    assert hello["tenant"] == label and label.startswith("viewer ")
    assert seen and all(e.priority == 3 and e.tenant == label for e in seen)
    assert label in seen_by_other and "ip:127.0.0.1" not in seen_by_other
    assert "ip:127.0.0.1" not in str([e for _, e in svc.hub.read(since).events])


def test_a_long_client_key_still_submits_as_its_own_tenant(svc):
    since, key = svc.hub.head, "ip:" + "f" * 100  # keys are made by the server: never refused
    hs = svc.submit([5], greedy(2), client=Client(key, presenter=False), tenant="someone-else")
    assert all(h.result(30).finish_reason == "length" for h in hs)
    seen = request_events(svc, since, hs[0].request_id)
    assert seen and all(e.tenant == svc.access.tenant_of(key) for e in seen)
    assert svc.access.tenant_of(key) != svc.access.tenant_of("ip:" + "f" * 99)


def test_api_priority_below_zero_needs_the_presenter_token(base, svc):
    body = {"prompt": "hi", "max_tokens": 2, "priority": -5, "user": "alice"}
    r = httpx.post(f"http://{base}/v1/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 403 and r.json()["error"]["param"] == "priority"
    since = svc.hub.head
    r = httpx.post(f"http://{base}/v1/completions", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    seen = request_events(svc, since, int(r.json()["id"].split("-")[1]))
    assert seen and all(e.priority == -5 and e.tenant == "alice" for e in seen)


# ---- the faults found by probing -----------------------------------------------------------------
def test_lone_surrogate_prompt_is_a_quick_clear_error(base, svc):
    t0 = time.monotonic()
    r = httpx.post(f"http://{base}/v1/completions", content=b'{"prompt": "\\ud800 hi", "max_tokens": 2}',
                   headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid Unicode" in r.json()["error"]["message"]
    with pytest.raises(ValueError, match="not valid Unicode"):
        svc.submit(messages=[{"role": "user", "content": "\ud800"}])
    assert time.monotonic() - t0 < 5


def test_tokenizer_failure_of_any_kind_rejects_at_once(svc):
    """Whatever a tokenizer raises (TypeError here, as for lone surrogates) ends the submit at once."""
    w = svc.workers["continuous"]
    real = w.engine.tokenizer.encode

    def broken(*a, **k):
        raise TypeError("tokenizer choked")

    w.engine.tokenizer.encode = broken
    try:
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="could not be read: TypeError: tokenizer choked"):
            svc.submit("hello", greedy(2))
        assert time.monotonic() - t0 < 5
    finally:
        w.engine.tokenizer.encode = real
    assert svc.submit("hello", greedy(2))[0].result(30).finish_reason == "length"


def test_binary_and_oversized_frames_get_errors_and_socket_stays_open(base):
    async def main():
        async with websockets.connect(f"ws://{base}/engine/ws?token={TOKEN}", max_size=2**22) as ws:
            await ws.recv()
            await ws.send(b"\x00\x01binary")
            err = json.loads(await ws.recv())
            assert err["type"] == "error" and "binary frames" in err["message"]
            err = await command(ws, {"cmd": "status", "pad": "x" * 70_000})
            assert err["type"] == "error" and "64 KiB" in err["message"]
            assert (await command(ws, {"cmd": "status", "ref": 1}))["ref"] == 1
    run(main())


def test_streamlit_refuses_large_frames_and_uploads_before_buffering():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["maxMessageSize"] <= 2  # MB; Streamlit's default (200) buffered 200 MB frames
    # MB, only the presenter's in a room (the test below); a recording is bounded again once decompressed
    assert cfg["server"]["maxUploadSize"] <= 64
    assert cfg["server"]["websocketPingInterval"] == ws_module.PING_S  # a stalled reader is noticed


def test_a_reader_that_stops_while_little_is_sent_is_dropped_by_an_unanswered_ping(svc):
    """Under every byte bound (the kernels hold what it did not read), a socket that never reads never
    answers the server's ping: it is closed within 2 pings' time, and its requests aborted. (A server of its
    own pings every 2 s: the app's PING_S, 5, is the same mechanism waited out for 10 s.)"""
    ping_s = 2
    svc.pause()
    with serve(create_app(svc), ping_s=ping_s) as quick:
        stuck = _never_reading_client(quick)
        try:
            _dropped_by_a_ping(svc, stuck, ping_s)
        finally:
            stuck.close()
            svc.resume()


def _dropped_by_a_ping(svc, stuck: socket.socket, ping_s: float) -> None:
    port = stuck.getsockname()[1]
    stuck.sendall(_client_frame(json.dumps({"cmd": "submit", "prompt": [5] * 4, "tag": "quiet",
                                            "params": {"max_tokens": 5}})))
    t0 = time.monotonic()
    while not _tagged(svc, "quiet") and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert _server_side_of(port), "the client should be connected while it may still answer"
    deadline = t0 + 2 * ping_s + 5
    while _server_side_of(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _server_side_of(port), "a reader that never answers a ping is still connected"
    ended = {item.request_id: item.finish_reason for _, item in svc.hub.read(0, limit=10**6).events
             if isinstance(item, FinishedEvent)}
    assert all(ended.get(r) == "abort" for r in _tagged(svc, "quiet"))


def test_room_mode_shows_no_traceback_on_any_page():
    from streamlit import config

    import app
    before = config.get_option("client.showErrorDetails")
    try:
        app.room_settings(Access(room=False))
        assert config.get_option("client.showErrorDetails") == before
        app.room_settings(Access(room=True, token=TOKEN))
        assert config.get_option("client.showErrorDetails") == "none"  # errors as messages; tracebacks in the log
    finally:
        config.set_option("client.showErrorDetails", before)


def test_failed_configure_changes_nothing_and_next_configure_works(base, svc):
    before = svc.cfg
    svc.configure(model="/nonexistent/model/dir")
    wait_settled(svc)
    assert svc.cfg == before and svc.status()["config"]["model"] == before.model
    # the old settings' engines, built again, serve
    assert all(h.result(30).finish_reason == "length" for h in svc.submit([5] * 4, greedy(3)))
    models = httpx.get(f"http://{base}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert models["data"][0]["id"] == before.model
    svc.configure(max_num_seqs=4)
    wait_settled(svc)
    assert svc.cfg.model == before.model and svc.cfg.max_num_seqs == 4
    assert all(w.engine.cfg.max_num_seqs == 4 for w in svc.workers.values())
    svc.configure(max_num_seqs=8)
    wait_settled(svc)


def test_reconfigure_releases_the_old_engine_but_keeps_shared_weights(svc):
    old = {s: weakref.ref(w.engine) for s, w in svc.workers.items()}
    model = svc.workers["continuous"].engine.runner.model
    svc.configure(block_size=8)
    wait_settled(svc)
    gc.collect()
    assert all(ref() is None for ref in old.values()), "an old engine (and its KV pool) is still alive"
    assert all(w.engine.runner.model is model for w in svc.workers.values())
    svc.configure(block_size=4)
    wait_settled(svc)


def test_a_reconfigure_gives_the_old_pools_memory_back(tiny_model_dirs):
    """Each pool here is 4 tensors of 16 MiB (under glibc's mmap threshold once it has adapted, so they
    live in malloc's arenas): trimmed only after the old engine's last reference is gone."""
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",), num_kv_blocks=32_768)
    try:
        before = _rss_mb()
        for block_size in (8, 4, 8):
            s.configure(block_size=block_size, num_kv_blocks=32_768 * 4 // block_size)
            wait_settled(s)
        assert _rss_mb() - before < 40, "a reconfigure kept an old KV pool's memory"
    finally:
        s.stop()


def test_a_reconfigure_builds_each_lane_on_the_memory_its_old_pool_gave_back(tiny_model_dirs, monkeypatch):
    """A lane's old KV pool is gone before its new one is made (on a GPU the new one is sized on what is
    free, kv/sizing.py): at no point does a lane hold two, and the lanes' count reaches the sizing."""
    from engine.kv import pool as pool_module, sizing
    made, asked = [], []
    real_init, real_budget = pool_module.KVPool.__init__, sizing.kv_budget_bytes

    def init(pool, *a, **kw):
        made.append(pool_module.live_pool_bytes("cpu"))  # what is held as this one is made
        real_init(pool, *a, **kw)

    def budget(cfg, device, lanes=1):
        asked.append(lanes)
        return real_budget(cfg, device, lanes)
    monkeypatch.setattr(pool_module.KVPool, "__init__", init)
    monkeypatch.setattr(sizing, "kv_budget_bytes", budget)
    s = make_service(tiny_model_dirs["llama"], num_kv_blocks=None, kv_cache_memory_gb=0.05)
    try:
        one = s.workers["dynamic"].engine.runner.pool.nbytes
        others = pool_module.live_pool_bytes("cpu") - 2 * one  # (other tests' services)
        made.clear()
        s.configure(max_num_seqs=4)
        wait_settled(s)
        held = max(made) - others
        assert len(made) == 2 and held <= one, f"held {held} bytes of pools as one was made; one is {one}"
        assert asked and set(asked) == {2}, "the two lanes share the device's memory"
        assert all(h.result(30).finish_reason == "length" for h in s.submit([5] * 4, greedy(3)))
    finally:
        s.stop()


def test_lanes_that_replace_others_are_sized_once_those_let_go_of_their_pools(tiny_model_dirs, monkeypatch):
    """A scenario's lanes replace the ones on the screen (set_lanes): each new lane's pool is made once the
    lanes it replaces have let go of theirs, though it shares their weights (on a GPU it is sized then)."""
    from engine.kv import pool as pool_module
    s = make_service(tiny_model_dirs["llama"], num_kv_blocks=None, kv_cache_memory_gb=0.05)
    try:
        one = s.workers["dynamic"].engine.runner.pool.nbytes
        gc.collect()
        others = pool_module.live_pool_bytes("cpu") - 2 * one
        made, real_init = [], pool_module.KVPool.__init__

        def init(pool, *a, **kw):
            made.append(pool_module.live_pool_bytes("cpu") - others)
            real_init(pool, *a, **kw)
        monkeypatch.setattr(pool_module.KVPool, "__init__", init)
        s.set_lanes({"fcfs": {"strategy": "continuous"}, "sjf": {"strategy": "continuous", "scheduling_policy": "sjf"}})
        wait_settled(s)
        # (at most: a pool an earlier test dropped may be collected meanwhile, and `others` then shrinks)
        first, second = sorted(made)
        assert first <= 0 and second <= one, f"held {made} bytes of pools as the new ones were made; one is {one}"
        assert all(h.result(30).finish_reason == "length" for h in s.submit([5] * 4, greedy(3)))
    finally:
        s.stop()


def test_a_lane_may_grow_its_pool_into_the_memory_its_old_pool_gives_back(tiny_model_dirs, monkeypatch):
    """An explicit kv_cache_memory_gb is checked against what is free and the lane's own pool, given back
    before the new one is made: on a device of C bytes where the old pool and the new one do not fit at once,
    the change is taken and runs; one larger than C is refused, naming both numbers."""
    from engine import device_memory
    from engine.kv import pool as pool_module
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",), num_kv_blocks=None,
                     kv_cache_memory_gb=0.05)
    try:
        gc.collect()
        capacity = pool_module.live_pool_bytes("cpu") + int(0.06 * device_memory.GiB)  # (the pools' only)
        monkeypatch.setattr(device_memory, "free_bytes", lambda device: capacity - pool_module.live_pool_bytes("cpu"))
        s.configure(kv_cache_memory_gb=0.08)  # 0.8 x (0.06 + 0.05 given back) GiB: it fits; with 0.05 held, not
        wait_settled(s)
        assert s.workers["continuous"].engine.kv_pool_bytes > 0.07 * device_memory.GiB  # (it grew from 0.05)
        assert all(h.result(30).finish_reason == "length" for h in s.submit([5] * 4, greedy(3)))
        with pytest.raises(ValueError, match=r"given back\); lower kv_cache_memory_gb"):
            s.configure(kv_cache_memory_gb=0.2)
    finally:
        s.stop()


def test_a_build_that_fails_after_making_its_pool_lets_go_of_it_before_the_old_settings_load(tiny_model_dirs,
                                                                                             monkeypatch):
    """A host pool larger than the machine's memory is refused after the new engine made its KV pool: that pool (held
    by the error's frames) is gone before the old settings' engine is sized and made."""
    from engine.kv import pool as pool_module
    made, real_init = [], pool_module.KVPool.__init__

    def init(pool, *a, **kw):
        made.append((kw.get("device", a[-1] if a else None), pool_module.live_pool_bytes("cpu")))
        real_init(pool, *a, **kw)
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",), num_kv_blocks=None,
                     kv_cache_memory_gb=0.05)
    try:
        one = s.workers["continuous"].engine.runner.pool.nbytes
        gc.collect()  # (other tests' dropped pools)
        others = pool_module.live_pool_bytes("cpu") - one
        monkeypatch.setattr(pool_module.KVPool, "__init__", init)
        with contextlib.suppress(ValueError):
            s.configure(preemption_mode="swap", swap_space_gb=1024)  # (more than this machine has)
        wait_settled(s)
        assert len(made) == 2, made  # the new engine's pool (its host pool refused), then the old settings'
        assert made[1][1] - others <= 0, "the failed engine's pool was still held"  # (<: others collected)
        assert s.cfg.preemption_mode != "swap"
        assert all(h.result(30).finish_reason == "length" for h in s.submit([5] * 4, greedy(3)))
    finally:
        s.stop()


def test_weights_the_new_settings_cannot_share_are_gone_before_the_new_engine_loads(tiny_model_dirs, monkeypatch):
    from engine.kv import pool as pool_module
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    try:
        old_model = weakref.ref(s.workers["continuous"].engine.runner.model)
        alive_then, real_init = [], pool_module.KVPool.__init__

        def init(pool, *a, **kw):
            gc.collect()  # (only what is still referenced survives)
            alive_then.append(old_model() is not None)
            status.append(s.workers["continuous"].status())  # what the page shows meanwhile
            real_init(pool, *a, **kw)
        status = []
        monkeypatch.setattr(pool_module.KVPool, "__init__", init)
        s.configure(dtype="bfloat16")
        wait_settled(s)
        assert alive_then == [False], "the old weights were still loaded as the new engine was made"
        assert status[0]["reconfiguring"] and status[0]["kv_blocks"] is None  # (no engine while it loads)
        assert not s.workers["continuous"].status()["reconfiguring"]
        assert all(h.result(30).finish_reason == "length" for h in s.submit([5] * 4, greedy(3)))
    finally:
        s.stop()


def test_a_lane_whose_old_settings_fail_to_load_again_says_so_and_a_later_change_recovers_it(tiny_model_dirs,
                                                                                          monkeypatch):
    from engine.serving import worker as worker_module
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    try:
        real = worker_module.build_engine
        monkeypatch.setattr(worker_module, "build_engine", lambda *a, **kw: (_ for _ in ()).throw(OSError("disk gone")))
        with contextlib.suppress(ValueError):  # (said at once where the lane failed before the call returned)
            s.configure(max_num_seqs=4)
        with pytest.raises(OSError, match="disk gone"):  # (a lane that failed to load says so)
            wait_settled(s)
        status = s.status()["engines"]["continuous"]
        assert not status["ready"] and "disk gone" in status["error"] and s.cfg.max_num_seqs == 8
        monkeypatch.setattr(worker_module, "build_engine", real)
        s.configure(max_num_seqs=4)
        wait_settled(s)
        assert s.status()["engines"]["continuous"]["ready"] and s.cfg.max_num_seqs == 4
        assert all(h.result(30).finish_reason == "length" for h in s.submit([5] * 4, greedy(3)))
    finally:
        s.stop()


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def test_kv_pool_bound_names_both_numbers(svc):
    with pytest.raises(ValueError, match=r"would take 100000\.00 GiB, but at most [\d.]+ GiB can be used"):
        svc.configure(kv_cache_memory_gb=100_000)
    assert svc.cfg.kv_cache_memory_gb is None


def test_reader_that_never_reads_is_dropped_in_time_its_requests_aborted_and_its_connection_closed(
        base, svc, monkeypatch):
    """What one client may leave unread is bounded: past it for SEND_TIMEOUT_S, the client is dropped, its
    requests aborted and its connection aborted (a polite close would wait behind megabytes forever)."""
    monkeypatch.setattr(ws_module, "SEND_TIMEOUT_S", 1.0)
    monkeypatch.setattr(ws_module, "MAX_QUEUED_BYTES", 256 * 1024)
    while svc.hub.head < svc.hub.capacity:  # a full ring to replay: more than the socket buffers hold
        for h in svc.submit([6] * 30, greedy(60)):
            h.result(30)
    svc.pause()  # the stuck client's request stays in flight until it is aborted
    stuck = _never_reading_client(base)
    port = stuck.getsockname()[1]
    try:
        stuck.sendall(_client_frame(json.dumps({"cmd": "submit", "prompt": [5] * 20, "tag": "stuck",
                                                "params": {"max_tokens": 50}})))
        t0 = time.monotonic()
        for _ in range(3):  # replay the ring: megabytes the client never reads
            stuck.sendall(_client_frame(json.dumps({"cmd": "subscribe", "from_seq": "oldest"})))
            time.sleep(0.1)
        deadline, aborted = time.monotonic() + 20, False
        while not aborted and time.monotonic() < deadline:
            time.sleep(0.05)
            ended = {item.request_id: item.finish_reason for _, item in svc.hub.read(0, limit=10**6).events
                     if isinstance(item, FinishedEvent)}
            stuck_ids = _tagged(svc, "stuck")
            aborted = bool(stuck_ids) and all(ended.get(r) == "abort" for r in stuck_ids)
        assert aborted, "the stuck client's request was not aborted"
        assert time.monotonic() - t0 < 1.0 + 4.0, "noticed long after the timeout"
        deadline = time.monotonic() + 5
        while _server_side_of(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _server_side_of(port), "the dropped client's connection is still open on the server"
    finally:
        stuck.close()
        svc.resume()


def _server_side_of(client_port: int) -> list:
    """This process's (the test server's) open TCP connections to a client port."""
    return [c for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == client_port and c.status != psutil.CONN_CLOSE]


def _tagged(svc, tag) -> set[int]:
    return {item.request_id for _, item in svc.hub.read(0, limit=10**6).events
            if isinstance(item, RequestEvent) and item.tag == tag}


def _never_reading_client(base) -> socket.socket:
    """A websocket client that completes the handshake, then never reads again (tiny receive buffer)."""
    host, port = base.split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    s.sendall(f"GET /engine/ws?token={TOKEN} HTTP/1.1\r\nHost: {base}\r\nUpgrade: websocket\r\n"
              "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              "Sec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:  # the 101 answer; frames sent before it would be lost
        head += s.recv(1)
    return s


def _client_frame(text: str) -> bytes:
    """One masked text frame, as a client must send it (RFC 6455)."""
    payload, mask = text.encode(), b"\x01\x02\x03\x04"
    n = len(payload)
    head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_loopback_server_refuses_a_rebound_host():
    """On loopback everyone is the presenter, so a page whose name was pointed at 127.0.0.1 (DNS
    rebinding: same origin as far as the browser knows) must not get through."""
    from engine.room.access import Access as A
    svc = A(room=False)
    assert svc.request_allowed("http://localhost:8501", "localhost:8501")
    assert svc.request_allowed(None, "127.0.0.1:8501") and svc.request_allowed(None, "[::1]:8501")
    assert not svc.request_allowed("http://evil.example:8501", "evil.example:8501")
    assert not svc.request_allowed(None, "evil.example:8501")
    assert A(room=True).request_allowed("http://192.168.1.5:8501", "192.168.1.5:8501")


def test_api_refuses_a_rebound_host_on_loopback(tiny_model_dirs):
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    try:
        with serve(create_app(s)) as b:
            r = httpx.get(f"http://{b}/v1/models", headers={"Host": "evil.example:8501"})
            assert r.status_code == 403
            assert httpx.get(f"http://{b}/v1/models").status_code == 200
    finally:
        s.stop()


def test_a_viewer_replaying_the_ring_in_a_loop_gets_a_bounded_number_of_bytes(base, svc):
    """Each re-subscribe from the ring's oldest event replays it; a viewer's replays draw on a byte budget
    (engine/room/replays.py), and past it the rest of each replay is skipped (said in `skipped`)."""
    from engine.room.replays import ReplayBudget
    while svc.hub.head < svc.hub.capacity:  # a full ring to replay
        for h in svc.submit([6] * 30, greedy(60)):
            h.result(30)
    burst, rate = 300_000, 100_000
    saved, svc.replays = svc.replays, ReplayBudget(burst, rate)

    async def viewer():
        got, skipped = 0, 0
        async with websockets.connect(f"ws://{base}/engine/ws") as ws:
            await ws.recv()
            t0 = time.monotonic()
            for i in range(20):
                await ws.send(json.dumps({"cmd": "subscribe", "from_seq": "oldest", "ref": i}))
                deadline = time.monotonic() + 0.3
                while time.monotonic() < deadline:
                    try:
                        msg = json.loads(await asyncio.wait_for(ws.recv(), 0.1))
                    except TimeoutError:
                        continue
                    if msg["type"] == "events":
                        got += sum(len(json.dumps(e)) for e in msg["events"])
                        skipped += msg["skipped"]
            return got, skipped, time.monotonic() - t0
    try:
        got, skipped, elapsed = run(viewer())
    finally:
        svc.replays = saved
    one_ring = len(str([e for _, e in svc.hub.read(0).events]))
    assert one_ring > 3 * burst  # without the budget it would have had 20 rings
    assert got <= burst + rate * elapsed + 20 * 64_000, (got, one_ring)  # + one message's overdraw each time
    assert skipped > 0


def test_the_replay_budget_refills_at_its_rate_per_client():
    from engine.room.replays import ReplayBudget
    now = [0.0]
    budget = ReplayBudget(1000, 100, clock=lambda: now[0])
    assert budget.spend("a", 900) and budget.spend("a", 500) and not budget.spend("a", 1)  # one overdraw
    assert budget.spend("b", 10)  # another client has its own
    now[0] = 3.0  # -400 + 300: still in debt
    assert not budget.spend("a", 1)
    now[0] = 5.0
    assert budget.spend("a", 50)
    now[0] = 100.0
    assert budget._refilled("a") == 1000  # never more than the burst


def test_streamlits_uploads_are_the_presenters_in_a_room():
    """Streamlit takes files from any session into memory (up to maxUploadSize each, as many as it sends):
    in a room only the presenter's reach it, refused before the body is read; on loopback everyone's."""
    from types import SimpleNamespace

    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    import app
    from engine.api.upload_guard import UPLOAD_PATH, UploadGuard
    from engine.room.access import PRESENTER_COOKIE
    reached = []

    async def upload(request):
        reached.append(len(await request.body()))
        return PlainTextResponse("stored")

    def client(access):
        routes = [Route(base + UPLOAD_PATH + "/{session}/{file}", upload, methods=["PUT", "DELETE"])
                  for base in ("", "/inflight")]  # (server.baseUrlPath mounts it under a prefix)
        return TestClient(UploadGuard(Starlette(routes=routes), lambda: SimpleNamespace(access=access)),
                          base_url="http://localhost")

    url, body = f"{UPLOAD_PATH}/s1/f1", b"x" * 1000
    room = client(Access(room=True, token=TOKEN))
    for method in ("put", "delete"):
        assert getattr(room, method)(url).status_code == 401
    assert room.put(f"/inflight{url}", content=body).status_code == 401
    assert room.put(url, content=body, headers={"Authorization": "Bearer not-it"}).status_code == 401
    assert room.put(url, content=body, headers={"Origin": "http://elsewhere.example"}).status_code == 403
    assert reached == []
    room.cookies.set(PRESENTER_COOKIE, TOKEN)
    assert room.put(url, content=body).status_code == 200
    assert client(Access(room=True, token=TOKEN)).put(url, content=body, headers={
        "Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client(Access(room=False)).put(url, content=body).status_code == 200
    assert reached == [1000] * 3
    assert any(m.cls is UploadGuard for m in app.app._user_middleware)  # the app puts it in front of Streamlit
