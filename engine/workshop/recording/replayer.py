"""Play a recording into an EventHub at its recorded pacing, scaled by a speed, without any engine.

The playhead is a position on the recording's own clock (the service clock when it was recorded), so
the views show the real timings whatever the speed. Seeking builds a new hub holding every event from
the start of the chunk the playhead lands in (format.py: a recording's first chunk is the whole of a
short one) up to it (a socket on the old hub closes, and its client resubscribes from the oldest event).
The hub holds a chunk's events whole (and up to MAX_RING of a short recording's). A chunk is checked when
the playhead enters the one before it (a thread of its own), so playing seldom waits for it, and never
under the lock the socket reads the position with; one that turns out wrong stops the replay, and `error`
says why.
"""
from __future__ import annotations

import json
import logging
import threading
import time

from ...config import EngineConfig
from ...event_hub import EventHub
from ...events import StatusEvent
from ...serving.lanes import lane_headers
from .format import Events, Recording, RecordingError

log = logging.getLogger(__name__)
SPEEDS = (0.25, 4.0)   # slowest and fastest
SPEED_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0)  # the choices a page offers, within SPEEDS
MAX_WAIT_S = 0.25      # the thread wakes at least this often (until, stop)
LOOP_HOLD_S = 3.0      # a looping replay shows its last frame this long (recording seconds) before restarting
MAX_RING = 20_000      # events a replay's hub holds (more than a chunk's at a GPU's pace)


def check_speed(speed) -> float:
    if not isinstance(speed, (int, float)) or not SPEEDS[0] <= speed <= SPEEDS[1]:
        raise ValueError(f"replay speed must be between {SPEEDS[0]}x and {SPEEDS[1]}x, got {speed!r}")
    return float(speed)


class RecordedEvent:
    """A recorded event as a replay's hub holds it: routed by its head (type, lane, strategy), sent as
    the JSON text it was recorded as, parsed only if a reader needs the dict (Event's wire interface)."""

    can_key = False  # it holds only the form it was recorded in: a step event's KV may be changes only

    def __init__(self, head: dict, text: str):
        self.TYPE, self.lane, self.strategy = head["type"], head.get("lane"), head.get("strategy")
        self.kv_pool, self.kv_is_key = (self.lane, head.get("part")), head.get("kv_key", True)
        self._text, self._wire = text, None

    def json(self) -> str:
        return self._text

    def wire(self) -> dict:
        if self._wire is None:
            self._wire = json.loads(self._text)
        return self._wire


class Replayer:
    def __init__(self, recording: Recording, *, speed: float = 1.0, loop: bool = False,
                 clock=time.monotonic, until=None):
        """clock: wall seconds (a fake one in tests); until(): when true, playback stops for good (checked
        by the thread); loop: start again after the end."""
        self.recording, self.loop, self.until = recording, loop, until
        self.speed = check_speed(speed)
        self.paused = False
        self.error: str | None = None  # why a chunk met late could not be played
        self.on_stop = None  # on_stop(self), once, when playback stops
        self._clock = clock
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset(recording.start)

    # ---- the playhead ------------------------------------------------------------------------
    def _reset(self, pos: float) -> None:
        chunks = self.recording.chunks
        ring = max(min(len(self.recording), MAX_RING), max((c.events for c in chunks), default=0))
        self.hub = EventHub(ring + 64)  # (a seek's chunk, whole)
        self._chunk = self.recording.chunk_at(pos)  # the chunk of the next event to publish, and its index there
        self._next = 0
        self._held: dict[int, Events] = {}  # the checked events of the playhead's chunk and the next one
        self._base_pos, self._base_wall = pos, self._clock()
        self._check_next()

    def _check_next(self) -> None:
        """Check the chunk after the playhead's in a thread of its own."""
        nxt = self._chunk + 1
        if nxt < len(self.recording.chunks) and nxt not in self._held:
            threading.Thread(target=self._hold, args=(nxt, True), daemon=True, name="inflight-replay-check").start()

    def _hold(self, i: int, quietly: bool = False) -> None:
        """Check chunk i (outside the lock: the socket reads the position meanwhile) and keep its events while
        the playhead is in it or the one before it. A wrong one raises RecordingError, but quietly (the
        recording keeps it: the replay says so when it gets there)."""
        try:
            events = self.recording.chunk(i)
        except RecordingError:
            if quietly:
                return
            raise
        with self._lock:
            if self._chunk <= i <= self._chunk + 1:
                self._held[i] = events

    def _raw_position(self) -> float:
        if self.paused:
            return self._base_pos
        return self._base_pos + (self._clock() - self._base_wall) * self.speed

    def position(self) -> float:
        """Where the playhead is, in recording seconds."""
        with self._lock:
            return min(self.recording.end, self._raw_position())

    @property
    def ended(self) -> bool:
        chunks = self.recording.chunks
        return not chunks or (self._chunk == len(chunks) - 1 and self._next >= chunks[-1].events)

    def pump(self) -> int:
        """Publish every event due by now; returns how many. A chunk not checked yet is checked here first."""
        count = 0
        while True:
            with self._lock:
                published, missing = self._publish_due()
            count += published
            if missing is None:
                return count
            self._hold(missing)

    def _publish_due(self) -> tuple[int, int | None]:
        """(events published, the chunk whose events are needed first, if any). Holds the lock."""
        pos, count = self._raw_position(), 0
        while not self.ended:
            events = self._held.get(self._chunk)
            if events is None:
                return count, self._chunk
            times, first = events.times, self._next
            while self._next < len(times) and times[self._next] <= pos:
                self.hub.publish(RecordedEvent(events.heads[self._next], events.texts[self._next]))
                self._next += 1
            count += self._next - first
            if self._next < len(times) or self._chunk + 1 == len(self.recording.chunks):
                break
            self._held.pop(self._chunk, None)
            self._chunk, self._next = self._chunk + 1, 0
            self._check_next()
        return count, None

    def _due_in(self) -> float:
        """Wall seconds until the next event is due (or the loop restarts; 0: its chunk is not checked yet)."""
        with self._lock:
            if self.paused or (self.ended and not self.loop):
                return MAX_WAIT_S
            if self.ended:
                due = self.recording.end + LOOP_HOLD_S
            elif (events := self._held.get(self._chunk)) is None:
                return 0.0
            else:
                due = events.times[self._next]
            return max(0.0, (due - self._raw_position()) / self.speed)

    # ---- controls ----------------------------------------------------------------------------
    def _rebase(self) -> None:
        self._base_pos, self._base_wall = self._raw_position(), self._clock()

    def pause(self) -> None:
        with self._lock:
            self._rebase()
            self.paused = True
            self._status("paused")

    def resume(self) -> None:
        with self._lock:
            self._base_wall = self._clock()
            self.paused = False
            self._status("resumed")

    def set_speed(self, speed: float) -> None:
        with self._lock:
            speed = check_speed(speed)
            self._rebase()
            self.speed = speed
            self._status("replay_speed")

    def seek(self, t: float) -> None:
        """Jump to recording time t: a fresh hub with every event of its chunk up to t, published at once."""
        if not isinstance(t, (int, float)):
            raise ValueError(f"seek needs a time in seconds, got {t!r}")
        with self._lock:
            self._reset(min(max(float(t), self.recording.start), self.recording.end))
        self._pump_or_stop()
        self._wake.set()

    def _pump_or_stop(self) -> None:
        """pump(), from the page's thread (a seek, the start): a chunk that turns out wrong stops the replay
        (the views go back to the engines, and `error` says why)."""
        try:
            self.pump()
        except RecordingError as e:
            self._failed(e)
            self.stop()

    def _status(self, what: str) -> None:
        self.hub.publish(StatusEvent(event=what, t=self.position()))
        self._wake.set()

    # ---- the thread --------------------------------------------------------------------------
    def start(self) -> Replayer:
        self._pump_or_stop()
        if not self.active:
            return self
        self._thread = threading.Thread(target=self._run, daemon=True, name="inflight-replay")
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._halt.is_set():
                self.pump()
                if self.until is not None and self.until():
                    break
                if self.loop and self.ended and not self.paused and self._raw_position() >= self.recording.end + LOOP_HOLD_S:
                    self.seek(self.recording.start)
                    continue
                self._wake.wait(min(MAX_WAIT_S, self._due_in()))
                self._wake.clear()
        except RecordingError as e:
            self._failed(e)
        except Exception:  # noqa: BLE001 - never leave the views on a replay that no longer plays
            log.exception("the replay stopped")
        finally:
            self._halt.set()
            if self.on_stop is not None:
                self.on_stop(self)

    def _failed(self, e: RecordingError) -> None:
        self.error = str(e)
        log.warning("the replay stopped: %s", e)

    @property
    def active(self) -> bool:
        return not self._halt.is_set()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        elif self._thread is None and self.on_stop is not None:
            self.on_stop(self)

    # ---- what the socket and the page read -----------------------------------------------------
    def info(self) -> dict:
        rec = self.recording
        return {"label": rec.label, "speed": self.speed, "paused": self.paused, "position": self.position(),
                "start": rec.start, "end": rec.end, "ended": self.ended}

    def status(self) -> dict:
        """The recorded service's status, as /engine/ws reports it, plus `replay`: every lane ready (it
        ran), the clock at the playhead."""
        recorded = self.recording.header.get("status", {})
        engines = {name: {**_static_facts(recorded.get("engines", {}).get(name, {})), "ready": True,
                          "error": None, "reconfiguring": False, "config": cfg}
                   for name, cfg in self.recording.header["lanes"].items()}
        return {**recorded, "type": StatusEvent.TYPE, "t": self.position(), "paused": self.paused, "slow_motion_s": 0.0,
                "engines": engines, "replay": self.info()}


def recorded_lanes(recording: Recording) -> tuple[list[str], dict[str, list[str]]]:
    """The recording's lanes and their header labels (none for a lane whose settings this version
    cannot read back)."""
    lanes = recording.header["lanes"]
    try:
        return list(lanes), lane_headers({n: EngineConfig(**c) for n, c in lanes.items()})
    except (TypeError, ValueError):
        return list(lanes), {}


def _static_facts(engine_status: dict) -> dict:
    """What stays true of a lane through the run (its live counters at the start would mislead)."""
    return {k: engine_status.get(k) for k in ("kv_blocks", "max_model_len", "device")}
