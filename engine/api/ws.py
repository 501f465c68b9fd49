"""/engine/ws: live engine events out (at most 60 messages/s per client), commands in."""
from __future__ import annotations

import asyncio
import logging

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from .protocol import ProtocolError, Subscription, parse_command, sampling_params

log = logging.getLogger(__name__)
MAX_RATE_HZ = 60
MAX_EVENTS_PER_MESSAGE = 512


def engine_ws_endpoint(get_service):
    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        await _Connection(ws, get_service()).serve()
    return endpoint


class _Connection:
    def __init__(self, ws: WebSocket, service):
        self.ws, self.svc = ws, service
        self.sub = Subscription()
        self.cursor = service.hub.head
        self.mine: dict[int, set[str]] = {}  # this client's unfinished requests -> strategies; aborted if it leaves

    async def serve(self) -> None:
        await self.ws.send_json({"type": "hello", "status": self.svc.status(), "cursor": self.cursor})
        sender = asyncio.create_task(self._send_loop())
        try:
            while True:
                text = await self.ws.receive_text()
                await self._handle(text)
        except WebSocketDisconnect:
            pass
        finally:
            sender.cancel()
            for rid in self.mine:
                self.svc.abort(rid)

    async def _send_loop(self) -> None:
        period = 1 / MAX_RATE_HZ
        try:
            while True:
                batch = self.svc.hub.read(self.cursor, limit=MAX_EVENTS_PER_MESSAGE)
                if batch.events:
                    self.cursor = batch.cursor
                    events = [v for _, item in batch.events if (v := self.sub.view(item)) is not None]
                    self._forget_finished(batch.events)
                    if events or batch.skipped:
                        await self.ws.send_json({"type": "events", "first_seq": batch.events[0][0],
                                                 "last_seq": batch.events[-1][0], "skipped": batch.skipped,
                                                 "events": events})
                await asyncio.sleep(period)
        except (WebSocketDisconnect, RuntimeError):
            return  # the client went away; the receive side cleans up

    def _forget_finished(self, events) -> None:
        for _, item in events:
            if item["type"] == "finished" and item["request_id"] in self.mine:
                left = self.mine[item["request_id"]]
                left.discard(item["strategy"])
                if not left:
                    del self.mine[item["request_id"]]

    async def _handle(self, text: str) -> None:
        ref = None
        try:
            msg = parse_command(text)
            ref = msg.get("ref")
            reply = await self._run(msg)
            await self.ws.send_json({"type": "reply", "ref": ref, "ok": True, **reply})
        except (ProtocolError, ValueError, TypeError, TimeoutError) as e:
            await self.ws.send_json({"type": "error", "ref": ref, "message": str(e)})
        except Exception as e:  # noqa: BLE001 - one bad command must not end the connection
            log.exception("websocket command failed")
            await self.ws.send_json({"type": "error", "ref": ref, "message": f"internal error: {e}"})

    async def _run(self, msg: dict) -> dict:
        cmd, svc = msg["cmd"], self.svc
        if cmd == "subscribe":
            from_seq = self.sub.update(msg)
            if from_seq is not None:
                self.cursor = 0 if from_seq == "oldest" else from_seq  # the hub skips what it no longer has
            return {"cmd": cmd, "cursor": self.cursor}
        if cmd == "submit":
            return await self._submit(msg)
        if cmd == "abort":
            rid = msg.get("request_id")
            if not isinstance(rid, int) or isinstance(rid, bool):
                raise ProtocolError("abort needs an integer request_id")
            svc.abort(rid)
        elif cmd == "pause":
            svc.pause()
        elif cmd == "resume":
            svc.resume()
        elif cmd == "step":
            svc.step_once()
        elif cmd == "slow_motion":
            svc.set_slow_motion(msg.get("interval_s"))
        elif cmd == "configure":
            changes = msg.get("changes") or {}
            if not isinstance(changes, dict):
                raise ProtocolError("changes must be an object of EngineConfig fields")
            await run_in_threadpool(svc.configure, msg.get("strategies"), **changes)
        return {"cmd": cmd, "status": svc.status()}

    async def _submit(self, msg: dict) -> dict:
        prompt, messages = msg.get("prompt"), msg.get("messages")
        tag = msg.get("tag", "ws")
        if not isinstance(tag, str) or len(tag) > 64:
            raise ProtocolError("tag must be a string of at most 64 characters")
        params = sampling_params(msg.get("params"))
        handles = await run_in_threadpool(self.svc.submit, prompt, params, messages=messages,
                                          strategies=msg.get("strategies"), tag=tag)
        rid = handles[0].request_id
        self.mine[rid] = {h.strategy for h in handles if not h.finished}
        return {"cmd": "submit", "request_id": rid, "strategies": [h.strategy for h in handles]}
