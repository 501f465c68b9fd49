"""What the soak harness's clients do: OpenAI calls (whole, streamed, dropped mid-stream), socket
clients (submit, abort, malformed frames, reconnects), a presenter changing settings, a viewer
trying controls, a viewer sending fuzzed frames and bodies (engine/harness/fuzz.py), and a monitor that
sees every request the server accepted."""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import httpx
import websockets

from ..events import FinishedEvent, RequestEvent
from . import fuzz

REQUEST_TIMEOUT_S = 300.0   # an answer later than this counts as lost
IDLE_S = 3.0                # a request still pending when the server has run nothing for this long is lost
# Every HTTP request on a connection of its own: a kept-alive connection the server closes after its idle
# timeout (uvicorn's 5 s) just as the client sends on it fails with ReadError, which a soak that sends
# at random gaps meets now and then (a lost request, or the fuzzer's end), and which is no fault of ours.
FRESH_CONNECTIONS = httpx.Limits(max_keepalive_connections=0)
MALFORMED = (b"\x00\x01 binary frame", "{not json", json.dumps({"cmd": "explode"}),
             json.dumps({"cmd": "status", "pad": "x" * 100_000}), json.dumps({"cmd": "abort", "request_id": "x"}))


@dataclass
class Tally:
    submitted: int = 0
    completed: int = 0
    aborted: int = 0          # by our own abort or disconnect, on purpose
    errored: int = 0          # finish_reason "error" (injected step faults) or HTTP 5xx
    refused: int = 0          # 4xx: the room's limits, a prompt too long
    lost: int = 0             # no outcome at all: must stay 0
    lost_how: list = field(default_factory=list)  # what the client saw of each loss (the first 20)
    latencies_s: list = field(default_factory=list)
    malformed_sent: int = 0
    malformed_answered: int = 0
    controls_refused: int = 0
    configures: int = 0
    reconnects: int = 0
    fuzz_sent: int = 0        # fuzzed socket frames, OpenAI bodies and /join bodies, from a viewer
    fuzz_answered: int = 0    # answered with a reply, an error message, or an HTTP status below 500
    fuzz_faulted: int = 0     # a valid fuzzed request that an injected step fault ended (HTTP 500, as designed)
    fuzz_5xx: int = 0         # any other 5xx: must stay 0
    fuzz_5xx_how: list = field(default_factory=list)  # what each of them was (the first 20): path, status, body

    def outcome(self, reason: str | None, t0: float | None = None) -> None:
        if reason in ("stop", "length"):
            self.completed += 1
            if t0 is not None:
                self.latencies_s.append(time.monotonic() - t0)
        elif reason == "abort":
            self.aborted += 1
        elif reason == "error":
            self.errored += 1
        else:
            self.lose(f"finish_reason {reason!r}")

    def lose(self, how: str) -> None:
        self.lost += 1
        if len(self.lost_how) < 20:
            self.lost_how.append(how)


@dataclass
class Load:
    base: str                 # host:port
    token: str
    prompts: list
    rng: random.Random
    tally: Tally
    stop_at: float            # time.monotonic() when submissions stop
    rate: float               # requests/s over all clients
    max_tokens: tuple = (8, 48)

    def params(self) -> dict:
        return {"max_tokens": self.rng.randint(*self.max_tokens), "temperature": 0.0,
                "ignore_eos": self.rng.random() < 0.5}

    def gap(self, share: float) -> float:
        return self.rng.expovariate(self.rate * share)


# ---- OpenAI API ----------------------------------------------------------------------------------
async def http_load(load: Load, share: float) -> None:
    headers = {"Authorization": f"Bearer {load.token}"}
    async with httpx.AsyncClient(base_url=f"http://{load.base}", headers=headers, timeout=REQUEST_TIMEOUT_S,
                                 limits=FRESH_CONNECTIONS) as c:
        tasks = []
        while time.monotonic() < load.stop_at:
            await asyncio.sleep(load.gap(share))
            kind = load.rng.choices(("whole", "stream", "drop"), (0.4, 0.4, 0.2))[0]
            tasks.append(asyncio.create_task(_http_one(c, load, kind)))
        await asyncio.gather(*tasks)


async def _http_one(c: httpx.AsyncClient, load: Load, kind: str) -> None:
    t = load.tally
    t.submitted += 1
    t0 = time.monotonic()
    body = {"messages": [{"role": "user", "content": load.rng.choice(load.prompts)}], **load.params()}
    try:
        if kind == "whole":
            r = await c.post("/v1/chat/completions", json=body)
            _http_outcome(t, r.status_code, r.json(), t0)
        else:
            await _http_stream(c, load, body, t0, drop_after=load.rng.randint(1, 4) if kind == "drop" else None)
    except (httpx.HTTPError, ValueError) as e:
        t.lose(f"{kind} HTTP request: {type(e).__name__}: {str(e)[:200]}")


def _http_outcome(t: Tally, status: int, body: dict, t0: float) -> None:
    if status == 200:
        t.outcome(body["choices"][0]["finish_reason"], t0)
    elif status >= 500:
        t.errored += 1
    else:
        t.refused += 1


async def _http_stream(c, load: Load, body: dict, t0: float, drop_after: int | None) -> None:
    t, chunks, reason = load.tally, 0, None
    async with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            await r.aread()
            return _http_outcome(t, r.status_code, {}, t0)
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                reason = "error"
                continue
            reason = chunk["choices"][0]["finish_reason"] if chunk["choices"] else reason
            chunks += 1
            if drop_after is not None and chunks >= drop_after and reason is None:
                t.aborted += 1  # we leave mid-stream: the server must abort it
                return
    t.outcome(reason, t0)


# ---- the socket ----------------------------------------------------------------------------------
class Socket:
    """One /engine/ws connection that keeps reading (a client that stops reading is dropped by the
    server, and its pings go unanswered): replies queue up for `command`, events go to `on_events`."""

    def __init__(self, url: str, on_events=None):
        self.url, self.on_events = url, on_events or (lambda events: None)
        self.replies: asyncio.Queue = asyncio.Queue()

    async def __aenter__(self) -> Socket:
        self.ws = await websockets.connect(self.url, max_size=2**24)
        self.hello = json.loads(await self.ws.recv())
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc) -> None:
        self._reader.cancel()
        await self.ws.close()

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            if msg["type"] in ("reply", "error"):
                self.replies.put_nowait(msg)
            elif msg["type"] == "events":
                self.on_events(msg)

    async def command(self, msg: dict | str | bytes) -> dict:
        await self.ws.send(msg if isinstance(msg, (str, bytes)) else json.dumps(msg))
        return await asyncio.wait_for(self.replies.get(), 60)


class SocketClient:
    """Submits over /engine/ws, aborts some of its requests, sends malformed frames, reconnects."""

    def __init__(self, load: Load, share: float):
        self.load, self.share = load, share
        self.pending: dict[int, float] = {}   # request id -> submit time
        self.ended: dict[int, str] = {}       # finished events that came before their submit's reply
        self.skipped = 0  # events the server said this socket missed (its ring dropped them unread)

    async def run(self) -> None:
        while time.monotonic() < self.load.stop_at:
            async with Socket(f"ws://{self.load.base}/engine/ws?token={self.load.token}", self._on_events) as ws:
                # only what it reads (the continuous lane's finished events): a client that takes every lane's
                # KV snapshots falls behind when three lanes step, and the ring coalesces events it never saw
                await ws.command({"cmd": "subscribe", "lanes": ["continuous"], "kv": False})
                await self._act_until_reconnect(ws)
                if time.monotonic() >= self.load.stop_at:
                    await self._wait_pending(REQUEST_TIMEOUT_S)
            self.load.tally.aborted += len(self.pending)  # dropped with the socket: the server aborts them
            self.pending.clear()

    async def _act_until_reconnect(self, ws) -> None:
        load, t = self.load, self.load.tally
        while time.monotonic() < load.stop_at:
            await asyncio.sleep(load.gap(self.share))
            action = load.rng.choices(("submit", "abort", "malformed", "reconnect"), (0.75, 0.1, 0.1, 0.05))[0]
            if action == "submit":
                await self._submit(ws)
            elif action == "abort" and self.pending:
                await ws.command({"cmd": "abort", "request_id": load.rng.choice(list(self.pending))})
            elif action == "malformed":
                t.malformed_sent += 1
                reply = await ws.command(load.rng.choice(MALFORMED))
                t.malformed_answered += reply["type"] == "error"
            elif action == "reconnect":
                t.reconnects += 1
                return

    async def _submit(self, ws) -> None:
        t = self.load.tally
        t.submitted += 1
        reply = await ws.command({"cmd": "submit", "prompt": self.load.rng.choice(self.load.prompts),
                                         "params": self.load.params(), "tag": "soak-ws"})
        if reply["type"] == "reply":
            rid = reply["request_id"]
            if rid in self.ended:  # a short request can finish before its reply is read
                t.outcome(self.ended.pop(rid), time.monotonic())
            else:
                self.pending[rid] = time.monotonic()
        else:
            t.refused += 1

    def _on_events(self, msg: dict) -> None:
        self.skipped += msg.get("skipped", 0)
        for ev in msg["events"]:
            if ev["type"] != "finished" or ev["lane"] != "continuous":
                continue
            if ev["request_id"] in self.pending:
                self.load.tally.outcome(ev["finish_reason"], self.pending.pop(ev["request_id"]))
            else:
                self.ended[ev["request_id"]] = ev["finish_reason"]
                if len(self.ended) > 10_000:  # everyone's requests end here: keep the recent ones
                    del self.ended[next(iter(self.ended))]

    async def _wait_pending(self, timeout: float) -> None:
        """Until every request of this socket ended, or the server has had nothing to run for IDLE_S (no
        finished event is coming then), or `timeout` s; what is still pending is lost."""
        deadline, idle_since, next_read = time.monotonic() + timeout, None, 0.0
        while self.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            if time.monotonic() < next_read:
                continue
            next_read = time.monotonic() + 1.0  # (the status once a second: each read is a connection of its own)
            try:
                idle = not busy(await server_status(self.load.base, self.load.token))
            except (OSError, websockets.WebSocketException):  # the server is gone: what is pending stays so
                idle = True
            if not idle:
                idle_since = None
            elif time.monotonic() - (idle_since := idle_since or time.monotonic()) > IDLE_S:
                break
        for rid in self.pending:  # (a finished event among those the server said it skipped is one way)
            self.load.tally.lose(f"socket request {rid}: no finished event, with the server idle for {IDLE_S:g} s "
                                 f"(or {timeout:.0f} s gone); this socket was told it missed {self.skipped} events")
        self.pending.clear()


# ---- control ---------------------------------------------------------------------------------------
async def presenter_changes(load: Load, every_s: float, changes: list[dict]) -> None:
    """Applies each of `changes` in turn, every `every_s` seconds, as the presenter."""
    async with Socket(f"ws://{load.base}/engine/ws?token={load.token}") as ws:
        await ws.command({"cmd": "subscribe", "lanes": [], "kv": False})
        i = 0
        while time.monotonic() + every_s < load.stop_at:
            await asyncio.sleep(every_s)
            msg = await ws.command({"cmd": "configure", "changes": changes[i % len(changes)]})
            load.tally.configures += msg["type"] == "reply"
            i += 1


async def viewer_tries_controls(load: Load, every_s: float) -> None:
    """Someone in the room without the token: every control command must be refused."""
    async with Socket(f"ws://{load.base}/engine/ws") as ws:
        await ws.command({"cmd": "subscribe", "lanes": [], "kv": False})
        while time.monotonic() < load.stop_at:
            await asyncio.sleep(every_s)
            msg = await ws.command({"cmd": load.rng.choice(("pause", "step", "configure")), "changes": {}})
            load.tally.controls_refused += msg["type"] == "error" and "presenter" in msg["message"]


async def fuzzer(load: Load, every_s: float, api_key: str) -> None:
    """A viewer sending what engine/harness/fuzz.py makes: socket frames (commands and controls), OpenAI and
    /join bodies. Each must be answered (a reply, an error, a status below 500) while the room is served."""
    rng, t = random.Random(load.rng.random()), load.tally
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    async with Socket(f"ws://{load.base}/engine/ws") as ws, \
            httpx.AsyncClient(base_url=f"http://{load.base}", timeout=REQUEST_TIMEOUT_S,
                              limits=FRESH_CONNECTIONS) as c:
        while time.monotonic() < load.stop_at:
            await asyncio.sleep(rng.expovariate(1 / every_s))
            t.fuzz_sent += 1
            kind = rng.random()
            if kind < 0.5:
                msg = await ws.command(fuzz.socket_frame(rng, fuzz.SOCKET_COMMANDS + fuzz.CONTROL_COMMANDS).text)
                t.fuzz_answered += msg["type"] in ("reply", "error")
                continue
            path, body = fuzz.openai_request(rng) if kind < 0.8 else ("/join/ask", fuzz.join_body(rng))
            async with c.stream("POST", path, content=body.text.encode(), headers=headers) as r:
                raw = await r.aread()  # a fuzzed body that is valid runs like any other request
            faulted = r.status_code == 500 and b"injected step fault" in raw
            t.fuzz_answered += r.status_code < 500 or faulted
            t.fuzz_faulted += faulted
            if r.status_code >= 500 and not faulted:
                t.fuzz_5xx += 1
                if len(t.fuzz_5xx_how) < 20:
                    t.fuzz_5xx_how.append(f"{path} {r.status_code}: {raw[:300].decode(errors='replace')}")


class Monitor:
    """Every request the server accepted, per lane, and how it ended (from the event stream)."""

    def __init__(self, base: str, token: str):
        self.url = f"ws://{base}/engine/ws?token={token}"
        self.accepted: set[tuple[str, int]] = set()
        self.ended: dict[tuple[str, int], str] = {}
        self.skipped = 0

    async def run(self) -> None:
        async with Socket(self.url, self._on_events) as ws:
            await ws.command({"cmd": "subscribe", "kv": False, "requests": []})
            await asyncio.Event().wait()  # until cancelled

    def _on_events(self, msg: dict) -> None:
        self.skipped += msg.get("skipped", 0)
        for ev in msg["events"]:
            if ev["type"] == RequestEvent.TYPE:
                self.accepted.add((ev["lane"], ev["request_id"]))
            elif ev["type"] == FinishedEvent.TYPE:
                self.ended[(ev["lane"], ev["request_id"])] = ev["finish_reason"]

    def unfinished(self) -> list:
        return sorted(self.accepted - set(self.ended))


async def server_status(base: str, token: str) -> dict:
    async with Socket(f"ws://{base}/engine/ws?token={token}") as ws:
        return ws.hello["status"]


def busy(status: dict) -> bool:
    """Whether any lane has work left: requests in flight, KV blocks held, or a reconfigure under way."""
    return any(e["in_flight"] or e["kv_used_blocks"] or e["reconfiguring"] for e in status["engines"].values())
