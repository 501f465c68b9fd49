"""/engine/ws: live engine events out (at most 30 messages/s per client), commands in.

Each connection is a client with a role (engine/room/access.py): control commands need the presenter
token in room mode; viewers watch, submit within the limits and abort their own requests.
While the service replays a recording (engine/workshop/recording), the socket serves the replay's events and
status instead; pause and resume then drive the replay. A socket closes when what it serves changes
(live <-> replay, or a seek): its client reconnects and rebuilds its views from the new events.
"""
from __future__ import annotations

import asyncio
import logging

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..events import FinishedEvent, StepMessage
from ..kv_wire import AS_IS, KvSync
from ..serving.service import SETTLE_WAIT_S
from ..room.access import PRESENTER_COOKIE, NotPresenter
from ..untrusted import is_int
from ..wire_json import dumps
from ..workshop.recording.stage import source
from ..workshop.scenarios import runner as scenario_runner
from ..workshop.scenarios.catalog import by_number
from . import socket_backlog
from .protocol import (
    CONTROL_COMMANDS,
    ProtocolError,
    Subscription,
    events_message,
    lane_names,
    lane_specs,
    parse_command,
    sampling_params,
)

log = logging.getLogger(__name__)
MAX_RATE_HZ = 30  # a display tick: what arrives between two goes out as one message
MAX_EVENTS_PER_MESSAGE = 512
# A client that has had more than MAX_QUEUED_BYTES waiting for this long (or whose send has waited this
# long) has stopped reading: it is disconnected, its connection aborted (its buffers freed) and its
# requests aborted, instead of pinning them forever. While over the bound it is sent nothing; when it
# reads again after SKIP_AFTER_S or more it goes on from the newest event (told how many it missed, the
# KV tables whole), not through a backlog it would never catch up with at a GPU's pace.
SEND_TIMEOUT_S = 10.0
MAX_QUEUED_BYTES = 1 << 20
SKIP_AFTER_S = 1.0  # over the bound this long (not a burst the client is taking): it goes on from the newest
# A client that stops reading while little is sent holds no backlog here (the kernels buffer it), so the
# server pings every socket this often and closes one that has not answered within as long (uvicorn's
# ws_ping_interval and ws_ping_timeout; Streamlit's server.websocketPingInterval sets both): a browser's
# socket answers even from a background tab, a stalled reader is gone within 2 * PING_S.
PING_S = 5
POLICY_VIOLATION = 1008
SOURCE_CHANGED = 1012  # "service restart": the client reconnects
REPLAY_COMMANDS = ("auth", "subscribe", "status", "pause", "resume")  # what a replay answers
AUTH_FAILURE_DELAY_S = 1.0


def engine_ws_endpoint(get_service):
    async def endpoint(ws: WebSocket) -> None:
        svc = get_service()
        if not svc.access.request_allowed(ws.headers.get("origin"), ws.headers.get("host")):
            log.warning("refused /engine/ws from origin %r", ws.headers.get("origin"))
            await ws.close(code=POLICY_VIOLATION)  # before accept: the handshake gets HTTP 403
            return
        await ws.accept()
        await _Connection(ws, svc).serve()
    return endpoint


class _Connection:
    def __init__(self, ws: WebSocket, service):
        self.ws, self.svc = ws, service
        token = ws.query_params.get("token") or ws.cookies.get(PRESENTER_COOKIE)
        key = service.access.key_of(ws.client and ws.client.host, ws.headers.get("x-forwarded-for"))
        self.client = service.access.client(key, token)
        self.sub = Subscription()
        self.kv_sync = KvSync()  # the KV pools whose changes this client can fold (engine/kv_wire.py)
        self.src = source(service)  # the service, or the replay it shows
        self.hub = self.src.hub
        self.cursor = self.hub.head
        self.mine: dict[int, set[str]] = {}  # this client's unfinished requests -> lanes; aborted if it leaves
        self.transport = socket_backlog.find_transport(ws._send)  # None: backlog not measured
        self.stalled = False  # dropped for not reading: the connection is aborted, not closed
        self.replay_end: int | None = None  # a viewer's replay from the ring's past runs up to here
        self.answering = 0  # commands being run: the socket stays open until each has its answer

    async def serve(self) -> None:
        try:
            await self._send({"type": "hello", "status": self.src.status(), "cursor": self.cursor,
                              "role": self.role, "room": self.svc.access.room,
                              # a viewer's own requests carry this tenant (nobody else's do)
                              "tenant": None if self.client.presenter else self.svc.access.tenant_of(self.client.key)})
            tasks = [asyncio.create_task(self._receive_loop()), asyncio.create_task(self._send_loop())]
        except (TimeoutError, WebSocketDisconnect, RuntimeError, OSError):
            return
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if not t.cancelled() and isinstance(t.exception(), Exception):
                    self.stalled = self.stalled or isinstance(t.exception(), TimeoutError)
                    log.info("websocket client dropped: %r", t.exception())
        finally:
            for t in tasks:
                t.cancel()
            for rid in self.mine:
                self.svc.abort(rid)
            if self.stalled:
                socket_backlog.abort(self.transport)

    @property
    def role(self) -> str:
        return "presenter" if self.client.presenter else "viewer"

    async def _receive_loop(self) -> None:
        while True:
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            if msg.get("text") is not None:
                await self._handle(msg["text"])
            else:  # a binary frame: say so and keep the connection
                await self._send({"type": "error", "ref": None,
                                  "message": "binary frames are not accepted: send each command as JSON text"})

    async def _send(self, message: dict | str) -> None:
        text = message if isinstance(message, str) else dumps(message)  # cannot fail, whatever it holds
        async with asyncio.timeout(SEND_TIMEOUT_S):  # no task per message, unlike wait_for
            await self.ws.send_text(text)

    async def _send_loop(self) -> None:
        period, stalled_since = 1 / MAX_RATE_HZ, None
        try:
            while True:
                changed = source(self.svc) is not self.src or self.src.hub is not self.hub
                if changed and not self.answering:  # (lanes and configure wait for engines that load)
                    await self.ws.close(code=SOURCE_CHANGED)
                    return
                if self._backlogged():
                    stalled_since = stalled_since or asyncio.get_running_loop().time()
                    if asyncio.get_running_loop().time() - stalled_since > SEND_TIMEOUT_S:
                        raise TimeoutError(f"more than {MAX_QUEUED_BYTES} bytes unread for {SEND_TIMEOUT_S:g} s")
                else:
                    if stalled_since is not None and asyncio.get_running_loop().time() - stalled_since >= SKIP_AFTER_S:
                        await self._skip_to_head()
                    stalled_since = None
                    await self._send_events()
                await asyncio.sleep(period)
        except TimeoutError:
            self.stalled = True
            log.warning("disconnecting a websocket client that stopped reading (%d requests aborted)",
                        len(self.mine))
            raise
        except (WebSocketDisconnect, RuntimeError, OSError):
            return  # the client went away; serve() cleans up

    def _backlogged(self) -> bool:
        return self.transport is not None and socket_backlog.queued_bytes(self.transport) > MAX_QUEUED_BYTES

    async def _send_events(self) -> None:
        batch = self.hub.read(self.cursor, limit=MAX_EVENTS_PER_MESSAGE)
        if not batch.events:
            return
        if batch.skipped:
            self.kv_sync.reset()
        events = [self.sub.view(item, self.kv_sync.form(item) if item.TYPE == StepMessage.TYPE else AS_IS)
                  for _, item in batch.events if self.sub.wants(item)]
        if self._over_replay_budget(batch.events[0][0], events):
            skipped, first = self.replay_end - batch.events[0][0] + batch.skipped, batch.events[0][0]
            self.cursor, self.replay_end = self.replay_end, None
            self.kv_sync.reset()
            await self._send(events_message(first, self.cursor - 1, skipped, []))
            return
        self.cursor = batch.cursor
        self._forget_finished(batch.events)
        if events or batch.skipped:
            await self._send(events_message(batch.events[0][0], batch.events[-1][0], batch.skipped, events))

    async def _skip_to_head(self) -> None:
        """A client that fell behind (it stopped reading for a while) goes on from now, not from the events
        it missed: it is told how many it missed, and each KV pool's next step comes with its tables whole."""
        first, self.cursor = self.cursor, max(self.cursor, self.hub.head)
        self.kv_sync.reset()
        if self.cursor > first:
            self._forget_finished(self.hub.read(first).events)  # (its requests that ended meanwhile)
            await self._send(events_message(first, self.cursor - 1, self.cursor - first, []))

    def _over_replay_budget(self, first_seq: int, events: list[str]) -> bool:
        """Whether these events replay the ring's past past this viewer's budget (engine/room/replays.py):
        then the rest of its replay is skipped, and it is told how many events it missed."""
        if self.replay_end is None or first_seq >= self.replay_end:
            self.replay_end = None
            return False
        return not self.svc.replays.spend(self.client.key, sum(map(len, events)))

    def _forget_finished(self, events) -> None:
        for _, event in events:
            if isinstance(event, FinishedEvent) and event.request_id in self.mine:
                left = self.mine[event.request_id]
                left.discard(event.lane)
                if not left:
                    del self.mine[event.request_id]

    async def _handle(self, text: str) -> None:
        ref = None
        self.answering += 1
        try:
            msg = parse_command(text)
            ref = msg.get("ref")
            reply = await self._run(msg)
            await self._send({"type": "reply", "ref": ref, "ok": True, **reply})
        except (ProtocolError, ValueError, TypeError, TimeoutError, NotPresenter) as e:
            await self._send({"type": "error", "ref": ref, "message": str(e)})
        except Exception as e:  # noqa: BLE001 - one bad command must not end the connection
            log.exception("websocket command failed")
            await self._send({"type": "error", "ref": ref, "message": f"internal error: {e}"})
        finally:
            self.answering -= 1

    async def _run(self, msg: dict) -> dict:
        cmd, svc = msg["cmd"], self.svc
        if cmd in CONTROL_COMMANDS:
            svc.access.require_presenter(self.client, cmd)
        if self.src is not svc and cmd not in REPLAY_COMMANDS:
            raise ProtocolError(f"a recording is playing, not the engines: {cmd!r} waits for the live view")
        if cmd == "auth":
            if not svc.access.is_token(msg.get("token")):
                await asyncio.sleep(AUTH_FAILURE_DELAY_S)  # guessing costs time
                raise NotPresenter("wrong presenter token")
            self.client = svc.access.client(self.client.key, msg["token"])
            return {"cmd": cmd, "role": self.role}
        if cmd == "subscribe":
            from_seq = self.sub.update(msg)
            self.kv_sync.reset()  # what it sees may have changed: a key frame of each pool first
            if from_seq is not None:  # the hub skips what it no longer has; nothing is past its head
                self.cursor = 0 if from_seq == "oldest" else min(from_seq, self.hub.head)
                self.replay_end = None if self.client.presenter else self.hub.head
            return {"cmd": cmd, "cursor": self.cursor}
        if cmd == "submit":
            return await self._submit(msg)
        if cmd == "abort":
            self._abort(msg.get("request_id"))
        elif cmd == "pause":
            self.src.pause()
        elif cmd == "resume":
            self.src.resume()
        elif cmd == "step":
            svc.step_once()
        elif cmd == "launch":
            return {"cmd": cmd, "lanes": svc.launch_batch(lane_names(msg)), "role": self.role}
        elif cmd == "slow_motion":
            svc.set_slow_motion(msg.get("interval_s"))
        elif cmd == "configure":
            changes = msg.get("changes") or {}
            if not isinstance(changes, dict) or "wait_s" in changes:
                raise ProtocolError("changes must be an object of EngineConfig fields")
            settled = await run_in_threadpool(lambda: svc.configure(lane_names(msg), SETTLE_WAIT_S, **changes))
            return {"cmd": cmd, "status": self.src.status(), "role": self.role, "settled": settled}
        elif cmd == "lanes":
            settled = await run_in_threadpool(svc.set_lanes, lane_specs(msg.get("lanes")), SETTLE_WAIT_S)
            return {"cmd": cmd, "status": self.src.status(), "role": self.role, "settled": settled}
        elif cmd == "scenario":  # the n-th shipped scenario (1-9 on the presenter's keyboard): its lanes, its stream
            await run_in_threadpool(scenario_runner.start, svc, by_number(msg.get("number")), self.client)
        return {"cmd": cmd, "status": self.src.status(), "role": self.role}

    def _abort(self, rid) -> None:
        if not is_int(rid):
            raise ProtocolError("abort needs an integer request_id")
        if rid not in self.mine:
            self.svc.access.require_presenter(self.client, "abort others")
        self.svc.abort(rid)

    def _abort_orphan(self, job) -> None:
        if not job.cancelled() and job.exception() is None:
            self.svc.abort(job.result()[0].request_id)

    async def _submit(self, msg: dict) -> dict:
        prompt, messages = msg.get("prompt"), msg.get("messages")
        tag = msg.get("tag", "ws")  # checked with the rest of the submission, by the service
        params = sampling_params(msg.get("params"))
        job = asyncio.ensure_future(run_in_threadpool(
            self.svc.submit, prompt, params, messages=messages, lanes=lane_names(msg), tag=tag, client=self.client,
            priority=msg.get("priority", 0), tenant=msg.get("tenant")))
        try:
            handles = await asyncio.shield(job)
        except asyncio.CancelledError:  # the client left while its request was being queued
            job.add_done_callback(self._abort_orphan)
            raise
        rid = handles[0].request_id
        self.mine[rid] = {h.lane for h in handles if not h.finished}
        return {"cmd": "submit", "request_id": rid, "lanes": [h.lane for h in handles]}
