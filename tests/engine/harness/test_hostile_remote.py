"""A hostile server as a remote lane (engine/harness/hostile_remote.py): whatever it sends, a request ends
with an error naming the bound it crossed, in bounded time, having read a bounded number of bytes, while
the local lane keeps serving; its /metrics is read under a size and a line bound, impossible gauges show
as unknown, and a reply over the bounds ends the polling with the reason in the lane's status."""
from __future__ import annotations

import time

import pytest

from engine.harness.hostile_remote import HostileRemote
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


def test_lines_are_read_whole_wherever_the_chunks_split_them_and_bounded():
    """bounded.read_lines on random lines (LF, CRLF or a lone CR, as server-sent events may end them; the
    last maybe unended) cut into random chunks gives back exactly the lines; past a bound, TooMuch."""
    import asyncio
    import random

    from engine.serving.remote.bounded import TooMuch, read_lines

    class Body:
        def __init__(self, chunks):
            self.chunks = chunks

        async def aiter_bytes(self):
            for c in self.chunks:
                yield c

    def read(data: bytes, cuts: int, max_line=64, max_total=1 << 20) -> list[str]:
        at = sorted(rng.sample(range(1, len(data)), min(cuts, len(data) - 1))) if len(data) > 1 else []
        chunks = [data[a:b] for a, b in zip([0] + at, at + [len(data)])]

        async def go():
            return [line async for line in read_lines(Body(chunks), max_line, max_total, "the stream")]
        return asyncio.run(go())

    rng = random.Random(0)
    for _ in range(500):
        lines = ["".join(rng.choice("ab é") for _ in range(rng.randint(0, 8))) for _ in range(rng.randint(1, 6))]
        ends = [rng.choice(["\n", "\r\n", "\r"]) for _ in lines]
        for i in range(len(lines) - 1):  # a CR and then an empty line's LF would read as one CRLF
            if ends[i] == "\r" and not lines[i + 1]:
                lines[i + 1] = "c"
        tail = rng.choice(["", "tail"])
        data = ("".join(line + end for line, end in zip(lines, ends)) + tail).encode()
        assert read(data, rng.randint(0, 12)) == lines + ([tail] if tail else [])
    with pytest.raises(TooMuch, match="the stream has a line over 64 bytes"):
        read(b"x" * 200 + b"\n", 5)
    with pytest.raises(TooMuch, match="the stream is over 1000 bytes"):
        read(b"ab\n" * 1000, 5, max_total=1000)
