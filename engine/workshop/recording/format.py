"""The recording file: gzip JSON lines. The first line is the header; each later line is one event as
/engine/ws sends it, with the service-clock time the hub published it:

    {"format": "inflight-recording", "version": 1, "model": ..., "device": ..., "started_at": ISO time,
     "lanes": {name: config}, "status": the service status when recording began}
    {"t": 12.345, "event": {"type": "step", "lane": "continuous", ...}}

A recording may be an upload, so reading one is bounded before the work (decompressed size, line
length, event count) and streamed, and every line is checked against the event contract
(engine/events_check.py) before the recording can replace the live stream. What is wrong is said as
"line N: reason". Events are kept as their JSON text (about a sixth of the memory of parsed ones).
"""
from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ...events import LanesEvent, StepMessage
from ...events_check import check_event, check_json
from ...kv_wire import is_key
from ...serving.lanes import check_lane_name
from ...untrusted import is_number, is_text, parse_json
from ...wire_json import dumps

FORMAT = "inflight-recording"
VERSION = 1
MAX_BYTES = 64 << 20       # decompressed; about three hours of two busy lanes
MAX_LINE_BYTES = 8 << 20   # one event (a step's block tables grow with the KV pool)
MAX_EVENTS = 250_000
MAX_LABEL_CHARS = 200      # model, device, started_at: the banner shows them
MAX_KV_TABLES = 4096       # a KV pool's block tables at once (requests holding blocks)


class RecordingError(ValueError):
    """Why a file cannot be played ("line N: reason")."""


@dataclass
class Recording:
    header: dict
    times: list[float] = field(default_factory=list)   # publish time of each event, in publishing order
    heads: list[dict] = field(default_factory=list)    # what the hub routes by: type, lane, strategy, part, kv_key
    texts: list[str] = field(default_factory=list)     # each event's JSON text, as the socket sends it

    def add(self, t: float, event: dict) -> None:
        head = {"type": event["type"], "lane": event.get("lane"), "strategy": event.get("strategy"),
                "part": event.get("part"), "kv_key": "kv" in event and is_key(event["kv"])}
        self.times.append(t)
        self.heads.append(head)
        self.texts.append(dumps(event))

    def __len__(self) -> int:
        return len(self.times)

    @property
    def events(self) -> list[tuple[float, dict]]:
        """(time, event) pairs, parsed (for tools and tests; the replayer keeps the text)."""
        return [(t, json.loads(x)) for t, x in zip(self.times, self.texts)]

    @property
    def lanes(self) -> list[str]:
        return list(self.header["lanes"])

    @property
    def start(self) -> float:
        return self.header.get("t0", self.times[0] if self.times else 0.0)

    @property
    def end(self) -> float:
        return self.times[-1] if self.times else self.start

    @property
    def label(self) -> str:
        """How the views name it: what ran, when and where."""
        return self.describe()

    def describe(self, quote=str) -> str:
        """The label, each recorded part passed through quote (a page escapes them for markdown)."""
        h = self.header
        return f"Recording of a real run: {quote(h['model'])}, {quote(h['started_at'][:10])}, {quote(h['device'])}"


class Writer:
    """Writes a recording line by line (flushed by close)."""

    def __init__(self, path: str | Path, header: dict):
        self._f = gzip.open(path, "wt", encoding="utf-8", compresslevel=9)
        self.bytes = 0  # decompressed bytes written: a recording stops before a reader would refuse it
        self._line({"format": FORMAT, "version": VERSION, **header})

    def event(self, t: float, event: dict) -> None:
        self._line({"t": round(t, 6), "event": event})

    def _line(self, obj: dict) -> None:
        line = dumps(obj) + "\n"
        self.bytes += len(line.encode())
        self._f.write(line)

    def close(self) -> None:
        self._f.close()


def load(source: str | Path | bytes) -> Recording:
    """Read and check a recording (a path, or an upload's bytes). RecordingError says why it cannot be
    played ("line N: reason"); the caller names the file. A first pass only measures (one line in memory
    at a time), so a file past a bound is refused before anything is parsed."""
    try:
        raw = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")
    except OSError as e:
        raise RecordingError(e.strerror or str(e)) from None
    with raw, gzip.GzipFile(fileobj=raw) as f:
        try:
            for _ in _lines(f):
                pass
            f.seek(0)
            return _read(_lines(f))
        except (OSError, EOFError, zlib.error) as e:  # not gzip, or cut short
            raise RecordingError(f"not a complete gzip file ({e})") from None


def _lines(f):
    """(line number, text) of each non-blank line, within the bounds."""
    total = 0
    for n in range(1, MAX_EVENTS + 2):
        line = f.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        total += len(line)
        if len(line) > MAX_LINE_BYTES:
            raise RecordingError(f"line {n}: longer than {MAX_LINE_BYTES:,} bytes")
        if total > MAX_BYTES:
            raise RecordingError(f"line {n}: the recording holds more than {MAX_BYTES:,} bytes of events")
        if line.strip():
            yield n, line
    raise RecordingError(f"more than {MAX_EVENTS} events")


def _read(lines) -> Recording:
    n, first = next(lines, (1, b""))
    rec = Recording(_header(_parse(n, first)))
    lanes, last_t = set(rec.header["lanes"]), float("-inf")  # the lanes so far (a run may switch them)
    kv = KvTally()
    for n, line in lines:
        obj = _parse(n, line)
        try:
            t, event = _event_line(obj, lanes, last_t)
            kv.check(event)
        except ValueError as e:
            raise RecordingError(f"line {n}: {e}") from None
        if event["type"] == LanesEvent.TYPE:
            lanes |= set(event["lanes"])
        rec.add(t, event)
        last_t = t
    return rec


class KvTally:
    """Each KV pool's tables as a recording's step events build them (engine/kv_wire.py), by length only:
    changes that would hold more tables than MAX_KV_TABLES, or a table longer than its pool, are refused
    (every line is within its bounds, but changes add up, and a player folds them at every step)."""

    def __init__(self):
        self.pools: dict[tuple, dict[str, int]] = {}  # (lane, part) -> request id -> its table's length

    def check(self, event: dict) -> None:
        if event["type"] != StepMessage.TYPE or "kv" not in event:
            return
        kv, pool = event["kv"], (event.get("lane"), event.get("part"))
        if is_key(kv):
            lengths = self.pools[pool] = {rid: len(t) for rid, t in kv["block_tables"].items()}
            changed = lengths.values()
        else:  # (the work is the changes': a step's own line bounds them)
            lengths, changed = self.pools.setdefault(pool, {}), []
            for rid, change in kv["tables"].items():
                if change is None:
                    lengths.pop(rid, None)
                else:
                    lengths[rid] = min(lengths.get(rid, 0), change[0]) + len(change) - 1
                    changed.append(lengths[rid])
        if len(lengths) > MAX_KV_TABLES:
            raise ValueError(f"event.kv holds more than {MAX_KV_TABLES} block tables")
        if any(n > kv["num_blocks"] for n in changed):
            raise ValueError("event.kv holds a block table longer than its pool (num_blocks)")


def _parse(n: int, line: bytes):
    try:
        return parse_json(line, "the line")
    except ValueError as e:
        raise RecordingError(f"line {n}: {e}") from None


def _header(h) -> dict:
    if not isinstance(h, dict) or h.get("format") != FORMAT:
        raise RecordingError("line 1: not an Inflight recording")
    if h.get("version") != VERSION:
        raise RecordingError(f"line 1: recording version {h.get('version')!r:.20}, this Inflight reads version {VERSION}")
    try:
        for key in ("model", "device", "started_at"):
            if not is_text(h.get(key), MAX_LABEL_CHARS):
                raise ValueError(f"{key} must be text of at most {MAX_LABEL_CHARS} characters")
        lanes = h.get("lanes")
        if not isinstance(lanes, dict) or not lanes:
            raise ValueError("lanes must name the recorded lanes")
        for lane, cfg in lanes.items():
            check_lane_name(lane)
            if not isinstance(cfg, dict):
                raise ValueError(f"lanes.{lane} must be the lane's settings")
        for key, check in (("t0", is_number), ("status", lambda s: isinstance(s, dict))):
            if key in h and not check(h[key]):
                raise ValueError(f"{key} has the wrong type")
        check_json(h, "header")
    except ValueError as e:
        raise RecordingError(f"line 1: {e}") from None
    return h


def _event_line(obj, lanes: set, last_t: float) -> tuple[float, dict]:
    if not isinstance(obj, dict) or set(obj) != {"t", "event"}:
        raise ValueError('each event line must be {"t": seconds, "event": {...}}')
    t, event = obj["t"], obj["event"]
    if not is_number(t):
        raise ValueError(f"t must be a number of seconds, got {type(t).__name__}")
    if t < last_t:
        raise ValueError(f"t goes back in time ({t} after {last_t})")
    check_event(event)
    for name in event["lanes"] if event["type"] == LanesEvent.TYPE else ():
        check_lane_name(name)
    lane = event.get("lane")
    if lane is not None and lane not in lanes:
        raise ValueError(f"event.lane {lane!r:.40} is not one of the recording's lanes")
    return float(t), event
