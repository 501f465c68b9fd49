"""A hostile server as a remote lane (engine/bench/hostile_remote.py): whatever it sends, a request ends
with an error naming the bound it crossed, in bounded time, having read a bounded number of bytes, while
the local lane keeps serving; its /metrics is read under a size and a line bound, impossible gauges show
as unknown, and a reply over the bounds ends the polling with the reason in the lane's status."""
from __future__ import annotations

import time

import pytest

from engine.bench.hostile_remote import HostileRemote
from engine.events import RemoteMetricsEvent
from engine_helpers import greedy
from service_helpers import serve, service_fixture, wait_settled

MiB = 1 << 20


@pytest.fixture(scope="module")
def hostile():
    server = HostileRemote()
    with serve(server.app) as base:
        yield server, f"http://{base}"


svc = service_fixture(strategies=("continuous",))


def use_remote(svc, spec: dict) -> None:
    svc.set_lanes({"local": svc.lanes.get("local", svc.cfg), "remote": spec})
    wait_settled(svc)


# mode -> what the request's error says; each needs at most these bytes sent before the client hangs up
ANSWERS = {
    "endless": ("the server streamed more pieces of text than max_tokens=16", 16 * MiB),
    "flood": ("the stream has a line over 1 MiB", None),  # one 30 MB piece: the client reads 1 MiB of it
    "no-newline": ("the stream has a line over 1 MiB", 16 * MiB),
    "error-flood": ("HTTP 500: its error body is over 64 KiB", 16 * MiB),
    "drip": ("not finished within max_request_s=1.5 s", 1024),
}


@pytest.mark.parametrize("mode", ANSWERS)
def test_a_hostile_answer_costs_bounded_time_and_bytes_and_the_local_lane_keeps_serving(svc, hostile, mode):
    server, base = hostile
    use_remote(svc, {"remote": f"{base}/{mode}/v1", "model": "m", "timeout_s": 1, "max_request_s": 1.5,
                     "metrics": False})
    t0 = time.monotonic()
    (far,) = svc.submit("x", greedy(16), lanes=["remote"])
    (near,) = svc.submit([5, 6, 7], greedy(8), lanes=["local"])
    assert near.result(30).finish_reason == "length"
    out = far.result(10)
    said, most = ANSWERS[mode]
    assert out.finish_reason == "error" and said in out.error, out.error
    assert time.monotonic() - t0 < 5 and len(out.text) <= 16 * 256
    time.sleep(0.3)  # the server notices the hang-up
    assert most is None or server.sent[mode] <= most, server.sent[mode]


# mode -> why the polling stops (None: it goes on, a poll at a time)
STOPS = {
    "endless": "its /metrics is over 4 MiB",
    "flood": "its /metrics has a line over 64 KiB",
    "no-newline": "its /metrics has a line over 64 KiB",
    "error-flood": None,
    "drip": None,
    "bad-gauges": None,
}


@pytest.mark.parametrize("mode", STOPS)
def test_a_hostile_metrics_reply_is_bounded_and_impossible_gauges_are_unknown(svc, hostile, mode):
    server, base = hostile
    cursor = svc.hub.head
    hits = server.hits[mode, "metrics"]
    use_remote(svc, {"remote": f"{base}/{mode}/v1", "model": "m", "timeout_s": 0.5})
    deadline = time.monotonic() + 10
    status = svc.status()["engines"]["remote"]
    while time.monotonic() < deadline and status["remote_metrics_stopped"] is None \
            and server.hits[mode, "metrics"] < hits + 3:
        time.sleep(0.1)
        status = svc.status()["engines"]["remote"]
    assert status["remote_metrics_stopped"] == STOPS[mode]
    if STOPS[mode] is None:
        assert server.hits[mode, "metrics"] >= hits + 3  # still polled
    gauges = [(e.num_running, e.num_waiting, e.kv_usage) for _, e in svc.hub.read(cursor).events
              if isinstance(e, RemoteMetricsEvent) and e.lane == "remote"]
    assert gauges == ([(None, None, None)] * len(gauges) if mode == "bad-gauges" else [])
    assert mode != "bad-gauges" or gauges
