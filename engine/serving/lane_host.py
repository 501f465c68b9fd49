"""LaneHost: what a lane's worker thread (engine/serving/worker.py, remote/lane.py) may ask of the
service that runs it, and nothing else. The service builds one and hands it to every worker."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LaneHost:
    clock: Callable[[], float]           # the service's clock: the time axis of every event
    publish: Callable[[object], object]  # an event (engine/events.py) onto the service's hub
    progress: Callable[[str], None]      # model download / conversion progress, while an engine loads
    paused: Callable[[], bool]           # the presenter paused: no iteration starts (single steps aside)
    pace_s: Callable[[int], float]       # how long an iteration of that many requests lasts at least
    before_step: Callable[[str], None]   # called with the lane before each step (chaos testing: may raise)
    engine_on: Callable[[object], object]  # a running engine whose weights a config can share, or None
    kv_lanes: Callable[[object], int]      # the lanes whose KV pools share a config's device (kv/sizing.py)
    # a worker loaded an engine for a config, its first or a reconfigure's (error: it could not)
    restarted: Callable[[object, object, Exception | None], None]
