"""The harness's socket client waits for the live engines, not the landing page's replay of the shipped
recording (which says every lane is ready while the models still load)."""
from __future__ import annotations

import json

import pytest
from websockets.exceptions import ConnectionClosedOK

from engine.harness import engine_client
from engine.harness.engine_client import EngineClient


class ScriptedSocket:
    """A socket whose server answers each command from a script of statuses; None: it closes the socket."""

    def __init__(self, statuses: list):
        self.statuses, self.sent = statuses, []

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text)["cmd"])

    def recv(self) -> str:
        if self.sent[-1] == "subscribe":
            return json.dumps({"type": "reply", "ref": "bench", "ok": True})
        status = self.statuses.pop(0)
        if status is None:
            raise ConnectionClosedOK(None, None)
        return json.dumps({"type": "reply", "ref": "bench", "ok": True, "status": status})


READY = {"engines": {"continuous": {"ready": True}, "static": {"ready": True}}}
LOADING = {"engines": {"continuous": {"ready": False}, "static": {"ready": True}}}


def test_the_client_reconnects_from_the_landing_replay_to_the_live_engines(monkeypatch):
    replay = ScriptedSocket([{**READY, "replay": {"label": "shipped"}}, None])  # then the engines are ready
    live = ScriptedSocket([LOADING, READY])
    monkeypatch.setattr("websockets.sync.client.connect", lambda url, **kw: live)
    monkeypatch.setattr(engine_client.time, "sleep", lambda s: None)
    client = EngineClient(replay, "ws://127.0.0.1:1/engine/ws")
    assert client.wait_ready() == ["continuous", "static"]
    assert client.ws is live and live.sent == ["subscribe", "status", "status"]


def test_the_client_gives_up_when_the_engines_never_come(monkeypatch):
    ws = ScriptedSocket([LOADING] * 3)
    clock = iter([0.0, 1.0, 2.0, 99.0])
    monkeypatch.setattr(engine_client.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(engine_client.time, "sleep", lambda s: None)
    with pytest.raises(TimeoutError, match="engines did not become ready"):
        EngineClient(ws, "ws://x").wait_ready(timeout=10)


def test_a_reconnect_the_server_refuses_is_tried_again(monkeypatch):
    live = ScriptedSocket([READY])
    tries = iter([OSError("connection refused"), live])

    def connect(url, **kw):
        got = next(tries)
        if isinstance(got, Exception):
            raise got
        return got
    monkeypatch.setattr("websockets.sync.client.connect", connect)
    monkeypatch.setattr(engine_client.time, "sleep", lambda s: None)
    client = EngineClient(ScriptedSocket([None, None]), "ws://x")
    assert client.wait_ready() == ["continuous", "static"] and client.ws is live


def test_a_replay_that_does_not_end_is_named_when_the_wait_gives_up(monkeypatch):
    """A presenter's replay plays until stopped: the engines are ready, but their events wait for it."""
    ws = ScriptedSocket([{**READY, "replay": {"label": "a workshop"}}] * 3)
    clock = iter([0.0, 1.0, 2.0, 99.0])
    monkeypatch.setattr(engine_client.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(engine_client.time, "sleep", lambda s: None)
    with pytest.raises(TimeoutError, match="a recording is still playing"):
        EngineClient(ws, "ws://x").wait_ready(timeout=10)
