"""Remote lanes: a second Inflight server on loopback as the "remote", beside a local lane on one stream;
servers that are down, slow, refuse, or drop the stream; aborts; the config's rules."""
from __future__ import annotations

import asyncio
import time

import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from engine.api.server import create_app
from engine.serving.lanes import lanes_from_env, parse_lane
from engine.serving.remote.config import RemoteConfig, remote_config
from engine.serving.remote.metrics import read_metrics
from engine_helpers import greedy
from engine.events import LanesEvent, RemoteMetricsEvent, RequestEvent, StepMessage
from service_helpers import assert_all_free, free_port, make_service, serve, wait_idle, wait_settled


@pytest.fixture(scope="module")
def remote(tiny_model_dirs):
    """Our own server, on a tiny model, as the remote: yields (its service, its /v1 URL)."""
    svc = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    with serve(create_app(svc)) as base:
        yield svc, f"http://{base}/v1"
    svc.stop()


@pytest.fixture(scope="module")
def svc(tiny_model_dirs, remote):
    s = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    yield s
    s.stop()


def use_lanes(svc, remote_spec: dict) -> None:
    svc.set_lanes({"local": svc.lanes.get("local", svc.cfg), "remote": remote_spec})
    wait_settled(svc)


def lane_events(svc, cursor: int, lane: str) -> list:
    return [item for _, item in svc.hub.read(cursor).events if item.lane == lane]


def test_same_greedy_text_on_a_local_and_a_remote_lane(svc, remote):
    remote_svc, url = remote
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model})
    cursor = svc.hub.head
    prompts = [dict(prompt="hello there"), dict(prompt=[5, 6, 7, 8, 9]),
               dict(messages=[{"role": "user", "content": "hi"}])]
    handles = [svc.submit(params=greedy(8), **p) for p in prompts]
    for local, far in handles:
        a, b = local.result(30), far.result(30)
        assert (b.finish_reason, b.error, b.text) == ("length", None, a.text)
        assert len(b.output_token_ids) == 8 and len(b.prompt_token_ids) == len(a.prompt_token_ids)  # usage
        assert b.arrival_s <= b.first_token_s <= b.finish_s
    wait_idle(svc)
    events = lane_events(svc, cursor, "remote")
    assert {e.strategy for e in events} == {"remote"}
    kinds = [e.TYPE for e in events if not isinstance(e, RemoteMetricsEvent)]
    assert kinds.count("request") == 3 and kinds.count("finished") == 3 and "step" in kinds
    assert [e.num_prompt_tokens for e in events if isinstance(e, RequestEvent)] == [None, 5, None]
    phases = [(entry.request_id, entry.phase) for e in events if isinstance(e, StepMessage) for entry in e.event.entries]
    rid = handles[0][1].request_id
    mine = [p for r, p in phases if r == rid]
    assert mine[0] == "prefill" and set(mine[1:]) <= {"decode"}
    text = "".join(e.deltas.get(rid, "") for e in events if isinstance(e, StepMessage))
    assert text == handles[0][1].output.text  # the step deltas carry the whole text
    status = svc.status()["engines"]["remote"]
    assert status["config"]["source"] == "remote" and status["kv_blocks"] is None
    assert_all_free(remote_svc)


def test_the_servers_own_gauges_are_polled_into_events(svc, remote):
    remote_svc, url = remote
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model})
    cursor, deadline = svc.hub.head, time.monotonic() + 5
    while not (polled := [e for e in lane_events(svc, cursor, "remote") if isinstance(e, RemoteMetricsEvent)]):
        assert time.monotonic() < deadline, "no remote_metrics event"
        time.sleep(0.1)
    ev = polled[0]
    assert ev.num_running == 0 and ev.num_waiting == 0 and 0 <= ev.kv_usage <= 1
    assert svc.status()["engines"]["remote"]["remote_metrics"]["kv_usage"] == ev.kv_usage
    # and our own /metrics leaves the remote lane out (its server has its own)
    assert 'lane="remote"' not in svc.metrics.exposition().decode()


def test_a_dead_server_ends_requests_with_error_and_the_local_lane_keeps_serving(svc):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    use_lanes(svc, {"remote": url, "model": "m"})
    t0 = time.monotonic()
    local, far = svc.submit([5, 6, 7], greedy(4))
    out = far.result(10)
    assert out.finish_reason == "error" and url in out.error and "ConnectError" in out.error
    assert time.monotonic() - t0 < 5
    assert local.result(30).finish_reason == "length"
    wait_idle(svc)


def test_abort_cancels_the_remote_stream(svc, remote):
    remote_svc, url = remote
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model})
    remote_svc.set_slow_motion(0.05)  # long enough to abort mid-stream
    try:
        (far,) = svc.submit([5, 6, 7], greedy(100), lanes=["remote"])
        deadline = time.monotonic() + 10
        while remote_svc.idle():
            assert time.monotonic() < deadline, "the request never reached the remote server"
            time.sleep(0.02)
        svc.abort(far.request_id)
        assert far.result(5).finish_reason == "abort"
        wait_idle(remote_svc, timeout=5)  # the server saw the stream close and aborted it too
    finally:
        remote_svc.set_slow_motion(0)
    assert_all_free(remote_svc)


def test_an_abort_right_after_the_submit_still_ends_the_request(svc, remote):
    remote_svc, url = remote
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model})
    worker = svc.workers["remote"]
    for _ in range(5):  # the abort may land before the request's task has run a single step
        (far,) = svc.submit([5, 6, 7], greedy(50), lanes=["remote"])
        svc.abort(far.request_id)
        assert far.result(5).finish_reason in ("abort", "length")
    deadline = time.monotonic() + 5
    while worker.handles and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not worker.handles, "an aborted request stayed in flight"


def test_a_refusal_is_an_error_with_the_servers_message(svc, remote):
    remote_svc, url = remote
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model})
    (far,) = svc.submit(list(range(3, 200)), greedy(4), lanes=["remote"])  # longer than its max_model_len
    out = far.result(10)
    assert out.finish_reason == "error" and "HTTP 400" in out.error and "128" in out.error


async def _dropping(request):
    async def body():
        yield b'data: {"choices": [{"index": 0, "text": "partial", "finish_reason": null}]}\n\n'
    return StreamingResponse(body(), media_type="text/event-stream")


async def _silent(request):
    while not await request.is_disconnected():  # until the client gives up
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def broken():
    """A server whose /dropping/v1 streams one chunk and hangs up, and whose /silent/v1 never answers."""
    app = Starlette(routes=[Route("/dropping/v1/completions", _dropping, methods=["POST"]),
                            Route("/silent/v1/completions", _silent, methods=["POST"])])
    with serve(app) as base:
        yield f"http://{base}"


def test_a_dropped_stream_and_a_silent_server_are_errors(svc, broken):
    use_lanes(svc, {"remote": f"{broken}/dropping/v1", "model": "m", "metrics": False})
    (far,) = svc.submit("x", greedy(4), lanes=["remote"])
    out = far.result(10)
    assert (out.finish_reason, out.text) == ("error", "partial") and "ended the stream" in out.error
    use_lanes(svc, {"remote": f"{broken}/silent/v1", "model": "m", "timeout_s": 0.5, "metrics": False})
    t0 = time.monotonic()
    (far,) = svc.submit("x", greedy(4), lanes=["remote"])
    out = far.result(10)
    assert out.finish_reason == "error" and "no answer within 0.5 s" in out.error
    assert time.monotonic() - t0 < 3


def test_remote_config_rules(svc):
    assert RemoteConfig("http://h:8000/v1/", "m").metrics_url == "http://h:8000/metrics"
    for bad in ("ftp://h/v1", "file:///etc/passwd", "http:///v1", "http://u:p@h/v1", "h:8000/v1"):
        with pytest.raises(ValueError):
            RemoteConfig(bad, "m")
    with pytest.raises(ValueError, match="model"):
        remote_config({"remote": "http://h/v1"})
    with pytest.raises(ValueError, match="unknown remote lane field"):
        remote_config({"remote": "http://h/v1", "model": "m", "block_size": 4})
    cfg = RemoteConfig("https://h/v1", "m", api_key="secret-key")
    assert "secret-key" not in repr(cfg) and "secret-key" not in str(cfg.to_dict())
    name, parsed = parse_lane("big:remote=http://h:8000/v1,model=org/m,max_concurrency=4", svc.cfg)
    assert (name, parsed) == ("big", RemoteConfig("http://h:8000/v1", "org/m", max_concurrency=4))


def test_the_api_key_is_sent_but_never_shown(svc, remote):
    remote_svc, url = remote
    cursor = svc.hub.head
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model, "api_key": "k" * 20})
    (far,) = svc.submit("hi", greedy(2), lanes=["remote"])
    assert far.result(10).finish_reason == "length"  # a loopback server takes any key
    shown = str([e for _, e in svc.hub.read(cursor).events if isinstance(e, LanesEvent)]) + str(svc.status())
    assert "k" * 20 not in shown and "'api_key_set': True" in shown


def test_read_metrics_sums_engines_and_prefers_the_lanes_model():
    text = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a",engine="0"} 3
vllm:num_requests_running{model_name="a",engine="1"} 2
vllm:num_requests_running{model_name="b",engine="0"} 7
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a",engine="0"} 0.2
vllm:kv_cache_usage_perc{model_name="a",engine="1"} 0.4
"""
    assert read_metrics(text, "a") == {"num_running": 5, "num_waiting": None, "kv_usage": pytest.approx(0.3)}
    assert read_metrics('# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="x"} 4\n',
                        "x")["num_waiting"] == 4
    assert read_metrics("# TYPE other gauge\nother 1\n", "a") is None
    llama = ("# HELP llamacpp:requests_processing Number of requests processing.\n"
             "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"
             "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n")
    assert read_metrics(llama, "any") == {"num_running": 3, "num_waiting": 2, "kv_usage": None}  # llama-server

def test_a_lane_switches_between_local_and_remote_and_configure_leaves_remote_lanes_alone(svc, remote):
    remote_svc, url = remote
    spec = {"remote": url, "model": remote_svc.cfg.model}
    svc.set_lanes({"a": spec, "b": svc.cfg})
    wait_settled(svc)
    assert [type(w).__name__ for w in svc.workers.values()] == ["RemoteWorker", "EngineWorker"]
    svc.configure(max_num_seqs=4)  # every local lane; the remote one has its server's settings
    wait_settled(svc)
    assert svc.lanes["b"].max_num_seqs == 4 and svc.lanes["a"] == remote_config(spec)
    with pytest.raises(ValueError, match="remote server"):
        svc.configure(lanes=["a"], max_num_seqs=2)
    old = svc.workers["a"]
    svc.set_lanes({"a": svc.cfg, "b": spec})
    wait_settled(svc)
    assert [type(w).__name__ for w in svc.workers.values()] == ["EngineWorker", "RemoteWorker"]
    old.join(5)
    assert not old.is_alive()  # the replaced remote lane drained and stopped
    outs = [h.result(30) for h in svc.submit([5, 6, 7], greedy(4))]
    assert [o.finish_reason for o in outs] == ["length", "length"] and outs[0].text == outs[1].text
    wait_idle(svc)


def test_the_server_starts_with_the_lanes_of_INFLIGHT_LANES(svc, tmp_path):
    path = tmp_path / "lanes.json"
    path.write_text('{"here": {}, "cluster": {"remote": "http://gpu-box:8000/v1", "model": "org/m"}}')
    lanes = lanes_from_env(svc.cfg, {"INFLIGHT_LANES": str(path)})
    assert lanes == {"here": svc.cfg, "cluster": RemoteConfig("http://gpu-box:8000/v1", "org/m")}
    assert lanes_from_env(svc.cfg, {}) is None


def test_a_removed_remote_lane_ends_its_requests_at_once_saying_why_then_stops(svc, remote):
    remote_svc, url = remote
    use_lanes(svc, {"remote": url, "model": remote_svc.cfg.model})
    old = svc.workers["remote"]
    remote_svc.set_slow_motion(0.03)
    try:
        (far,) = svc.submit([5, 6, 7], greedy(6), lanes=["remote"])
        svc.set_lanes({"local": svc.lanes["local"]})
        out = far.result(10)
        assert out.finish_reason == "abort" and "lane 'remote' was removed" in out.error
        old.join(5)
        assert not old.is_alive()
    finally:
        remote_svc.set_slow_motion(0)
