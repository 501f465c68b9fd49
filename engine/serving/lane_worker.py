"""LaneWorker: what the service asks of a lane's worker, whichever runs it. EngineWorker (worker.py) steps a
local engine in its own thread; RemoteWorker (remote/lane.py) forwards to a remote server. Only a local
worker is reconfigured in place or told to launch a partial batch (the service checks its kind first)."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from .handles import RequestHandle


@runtime_checkable
class LaneWorker(Protocol):
    lane: str
    cfg: object                  # EngineConfig (local) or RemoteConfig (remote)
    engine: object | None        # the local engine, None for a remote lane (or before it loaded)
    load_error: Exception | None

    def start(self) -> None: ...                                     # its thread
    def join(self, timeout: float | None = None) -> None: ...
    def add(self, handle: RequestHandle, sub) -> None: ...           # accept or reject through the handle
    def abort(self, request_id: int) -> None: ...
    def step_once(self) -> None: ...                                 # while paused: one iteration
    def wake(self) -> None: ...
    def stop(self, drain: bool = False, reason: str = "the service stopped") -> None: ...
    def wait_ready(self, timeout: float | None = None) -> None: ...  # raises its load error
    def idle(self) -> bool: ...
    def status(self) -> dict: ...
