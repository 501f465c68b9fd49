"""The recording file: gzip JSON lines, written as a series of gzip members (chunks) of a few MiB each, so
that a long recording is read one chunk at a time (any gzip tool still reads it as one stream). The first
line is the header; each later line is one event as /engine/ws sends it, with the service-clock time the
hub published it:

    {"format": "inflight-recording", "version": 1, "model": ..., "device": ..., "started_at": ISO time,
     "lanes": {name: config}, "status": the service status when recording began}
    {"t": 12.345, "event": {"type": "step", "lane": "continuous", ...}}

Each chunk the recorder writes starts with the lanes as they are (a `lanes` event) and each KV pool's
first step in it carries its tables whole, so a chunk plays without the ones before it (a seek).

A recording may be an upload, so reading one is bounded before the work (the file's size, each chunk's
and all chunks' decompressed size, line length, event count): `load` only measures the chunks (a piece of
one and its first and last lines in memory at a time), keeps them compressed and checks the first; a later chunk's
lines are checked against the event contract (engine/events_check.py) when it is first played, before
any of its events reaches a view. What is wrong is said as "line N: reason". A checked chunk keeps its
events as their JSON text (about a sixth of the memory of parsed ones); the last one checked is kept.
"""
from __future__ import annotations

import json
import threading
import zlib
from bisect import bisect_right
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
CHUNK_BYTES = 4 << 20         # the writer starts a new chunk past this many bytes of lines
MAX_CHUNK_BYTES = 64 << 20    # one chunk decompressed (a recording written before chunks is one chunk)
MAX_BYTES = 4 << 30           # all chunks decompressed: over an hour of two busy lanes at an H100's pace
MAX_FILE_BYTES = 512 << 20    # the file itself (compressed)
MAX_CHUNKS = 4096
MAX_LINE_BYTES = 8 << 20      # one event (a step's block tables grow with the KV pool)
MAX_EVENTS = 4_000_000        # lines, in all
MAX_CHUNK_EVENTS = 250_000    # lines, in one chunk (a replay's hub holds a chunk's events)
MAX_LABEL_CHARS = 200         # model, device, started_at: the banner shows them
MAX_KV_TABLES = 4096          # a KV pool's block tables at once (requests holding blocks)
PIECE = 256 << 10             # decompressed at a time while measuring


class RecordingError(ValueError):
    """Why a file cannot be played ("line N: reason")."""


@dataclass
class Events:
    """A checked chunk's events, in publishing order."""
    times: list[float] = field(default_factory=list)   # publish time of each event
    heads: list[dict] = field(default_factory=list)    # what the hub routes by (type, lane, strategy, part, ...)
    texts: list[str] = field(default_factory=list)     # each event's JSON text, as the socket sends it

    def add(self, t: float, event: dict) -> None:
        head = {"type": event["type"], "lane": event.get("lane"), "strategy": event.get("strategy"),
                "part": event.get("part"), "kv_key": "kv" in event and is_key(event["kv"])}
        self.times.append(t)
        self.heads.append(head)
        self.texts.append(dumps(event))


@dataclass
class Chunk:
    """One gzip member: its compressed bytes, its first line's number in the file, and what it spans."""
    data: memoryview
    first_line: int
    events: int
    t0: float
    t1: float
    header: bool = False  # it starts with the file's header line (the first chunk)


class Recording:
    def __init__(self, header: dict, chunks: list[Chunk]):
        self.header, self.chunks = header, chunks
        self._starts = [c.t0 for c in chunks]
        self._last: tuple[int, Events] | None = None  # the chunk checked last (a replay holds its own two)
        self._wrong: dict[int, RecordingError] = {}    # chunks that failed their check, and why
        self._locks = [threading.Lock() for _ in chunks]  # one checker a chunk (the replay's prefetch and pump)

    def __len__(self) -> int:
        return sum(c.events for c in self.chunks)

    def chunk(self, i: int) -> Events:
        """Chunk i's events, checked (on first use; RecordingError names the line that is wrong)."""
        with self._locks[i]:
            last = self._last
            if last is not None and last[0] == i:
                return last[1]
            if i in self._wrong:
                raise self._wrong[i]
            try:
                events = _check_chunk(self.chunks[i], self.header, self.chunks[i - 1].t1 if i else float("-inf"))
            except RecordingError as e:
                self._wrong[i] = e
                raise
            self._last = (i, events)
            return events

    def check_start(self) -> None:
        """Check every chunk due when a replay starts (RecordingError: one is wrong), so that a replay never
        replaces what the views show with a recording it cannot play from its start."""
        for i, c in enumerate(self.chunks):
            if c.t0 > self.start:
                return
            self.chunk(i)

    def chunk_at(self, t: float) -> int:
        """The chunk that holds recording time t (the first one before the first event)."""
        return max(0, bisect_right(self._starts, t) - 1)

    @property
    def events(self) -> list[tuple[float, dict]]:
        """(time, event) pairs, parsed, every chunk checked (for tests and short recordings)."""
        return list(self.each_event())

    def each_event(self, types: tuple[str, ...] | None = None):
        """(time, event) pairs, parsed a chunk at a time (of these types only, if given)."""
        for i in range(len(self.chunks)):
            ev = self.chunk(i)
            yield from ((t, json.loads(x)) for t, h, x in zip(ev.times, ev.heads, ev.texts)
                        if types is None or h["type"] in types)

    @property
    def lanes(self) -> list[str]:
        return list(self.header["lanes"])

    @property
    def start(self) -> float:
        first = self.chunks[0].t0 if self.chunks else self.header.get("t0", 0.0)
        return min(self.header.get("t0", first), first)

    @property
    def end(self) -> float:
        return self.chunks[-1].t1 if self.chunks else self.start

    @property
    def label(self) -> str:
        """How the views name it: what ran, when and where."""
        return self.describe()

    def describe(self, quote=str) -> str:
        """The label, each recorded part passed through quote (a page escapes them for markdown)."""
        h = self.header
        return f"Recording of a real run: {quote(h['model'])}, {quote(h['started_at'][:10])}, {quote(h['device'])}"


class Writer:
    """Writes a recording line by line, a chunk a gzip member (flushed by close)."""

    def __init__(self, path: str | Path, header: dict):
        self._f = open(path, "wb")
        self.bytes = 0        # decompressed bytes written: a recording stops before a reader would refuse it
        self.file_bytes = 0   # compressed bytes written
        self.lines = 0
        self.chunks = 1
        self._chunk_bytes = 0
        self._z = _member()
        self._line({"format": FORMAT, "version": VERSION, **header})

    def event(self, t: float, event: dict) -> None:
        self._line({"t": round(t, 6), "event": event})

    @property
    def chunk_full(self) -> bool:
        """Past CHUNK_BYTES: the next line should start a new chunk."""
        return self._chunk_bytes >= CHUNK_BYTES

    def new_chunk(self) -> None:
        self._write(self._z.flush())
        self._z, self._chunk_bytes = _member(), 0
        self.chunks += 1

    def room(self) -> bool:
        """Whether a new chunk and the longest line would still be within every bound a reader checks."""
        return (self.bytes + MAX_LINE_BYTES < MAX_BYTES and self.file_bytes + 2 * MAX_LINE_BYTES < MAX_FILE_BYTES
                and self.lines + 2 < MAX_EVENTS and self.chunks + 1 < MAX_CHUNKS)

    def _line(self, obj: dict) -> None:
        line = (dumps(obj) + "\n").encode()
        self.bytes += len(line)
        self._chunk_bytes += len(line)
        self.lines += 1
        self._write(self._z.compress(line))

    def _write(self, data: bytes) -> None:
        self.file_bytes += len(data)
        self._f.write(data)

    def close(self) -> None:
        self._write(self._z.flush())
        self._f.close()


def _member():
    return zlib.compressobj(9, zlib.DEFLATED, 31)  # (wbits 31: a gzip member)


def load(source: str | Path | bytes) -> Recording:
    """Read a recording (a path, or an upload's bytes) and check its header and first chunk.
    RecordingError says why it cannot be played ("line N: reason"); the caller names the file. Each
    chunk is measured as it is decompressed (a piece of it, and its first and last lines, in memory at a
    time) and kept compressed, so a file past a bound is refused before anything is parsed."""
    data = memoryview(_read_bytes(source))
    totals, header, chunks = _Totals(), None, []
    try:
        for start, lines, end in _members(data, totals):
            if header is None:
                if not lines.firsts:
                    raise RecordingError("line 1: not an Inflight recording")
                header = _header(_parse(*lines.firsts[0]))
            last_t = chunks[-1].t1 if chunks else float("-inf")
            chunk = _chunk(data[start:end], lines, totals.chunks == 1, last_t)
            if chunk is not None:
                chunks.append(chunk)
    except zlib.error as e:  # not gzip, or cut short
        raise RecordingError(f"not a complete gzip file ({e})") from None
    if header is None:
        raise RecordingError("line 1: not an Inflight recording")
    rec = Recording(header, chunks)
    if rec.chunks:
        rec.chunk(0)
    return rec


def _read_bytes(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source) if not isinstance(source, bytes) else source
    else:
        try:
            with open(source, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as e:
            raise RecordingError(e.strerror or str(e)) from None
    if len(data) > MAX_FILE_BYTES:
        raise RecordingError(f"the file is larger than {MAX_FILE_BYTES:,} bytes")
    return data


@dataclass
class _Totals:
    bytes: int = 0
    lines: int = 0
    chunks: int = 0


class _Lines:
    """One member's lines as its pieces arrive, each within the bounds as it ends; keeps only the member's
    first two and last non-blank lines."""

    def __init__(self, totals: _Totals):
        self.totals, self.first_line = totals, totals.lines + 1
        self.bytes, self.lines, self.events = 0, 0, 0
        self.firsts: list[tuple[int, bytes]] = []  # (line number, line)
        self.last: tuple[int, bytes] = (0, b"")
        self._partial = b""

    def feed(self, piece: bytes) -> None:
        parts = piece.split(b"\n")
        parts[0] = self._partial + parts[0]
        for line in parts[:-1]:
            self._line(line, 1)
        self._partial = parts[-1]
        self._long(self._partial, self.totals.lines + 1)

    def end(self) -> None:
        if self._partial:
            self._line(self._partial, 0)
            self._partial = b""

    def _line(self, line: bytes, newline: int) -> None:
        n = self.totals.lines = self.totals.lines + 1
        self.lines += 1
        self.bytes += len(line) + newline
        self.totals.bytes += len(line) + newline
        if n > MAX_EVENTS:
            raise RecordingError(f"more than {MAX_EVENTS:,} events")
        if self.lines > MAX_CHUNK_EVENTS:
            raise RecordingError(f"line {n}: a chunk holds more than {MAX_CHUNK_EVENTS:,} events")
        if self.bytes > MAX_CHUNK_BYTES:
            raise RecordingError(f"line {n}: a chunk holds more than {MAX_CHUNK_BYTES:,} bytes")
        if self.totals.bytes > MAX_BYTES:
            raise RecordingError(f"line {n}: the recording holds more than {MAX_BYTES:,} bytes of events")
        self._long(line, n)
        if line.strip():
            self.events += 1
            if len(self.firsts) < 2:
                self.firsts.append((n, line))
            self.last = (n, line)

    @staticmethod
    def _long(line: bytes, n: int) -> None:
        if len(line) > MAX_LINE_BYTES:
            raise RecordingError(f"line {n}: longer than {MAX_LINE_BYTES:,} bytes")


def _members(data: memoryview, totals: _Totals):
    """(start, lines, end) of each gzip member of data, measured as it is decompressed (one at a time: the
    caller keeps what it needs of each before the next)."""
    pos = 0
    while pos < len(data):
        totals.chunks += 1
        if totals.chunks > MAX_CHUNKS:
            raise RecordingError(f"more than {MAX_CHUNKS} chunks (gzip members)")
        d, lines, fed = zlib.decompressobj(wbits=31), _Lines(totals), pos
        while not d.eof:
            if d.unconsumed_tail:
                lines.feed(d.decompress(d.unconsumed_tail, PIECE))
            elif fed < len(data):
                lines.feed(d.decompress(data[fed:fed + PIECE], PIECE))
                fed = min(len(data), fed + PIECE)
            else:
                raise zlib.error("cut short")
        lines.end()
        end = fed - len(d.unused_data)
        yield pos, lines, end
        pos = end


def _chunk(data: memoryview, lines: _Lines, first: bool, last_t: float) -> Chunk | None:
    """A member as a chunk with its span (its first and last event's time), or None: it holds no event."""
    events = lines.events - first  # (the first member's first line is the header)
    if events <= 0:
        return None
    start = lines.firsts[1] if first else lines.firsts[0]
    t0, t1 = _time(*start), _time(*lines.last)
    if t0 < last_t:
        raise RecordingError(f"line {start[0]}: t goes back in time ({t0} after {last_t})")
    return Chunk(data, lines.first_line, events, t0, max(t0, t1), header=first)  # (t1 < t0: refused with it)


def _time(n: int, line: bytes) -> float:
    """An event line's time, as far as a chunk's span needs it (the rest is checked with its chunk)."""
    obj = _parse(n, line)
    t = obj.get("t") if isinstance(obj, dict) else None
    if not is_number(t):
        raise RecordingError(f"line {n}: " + ('each event line must be {"t": seconds, "event": {...}}'
                                              if not isinstance(obj, dict) else
                                              f"t must be a number of seconds, got {type(t).__name__}"))
    return float(t)


def _check_chunk(chunk: Chunk, header: dict, last_t: float) -> Events:
    """Every event line of a chunk checked against the contract, its KV changes within their bounds."""
    lines = zlib.decompress(chunk.data, wbits=31).split(b"\n")
    out, lanes, kv = Events(), set(header["lanes"]), KvTally()  # the lanes so far (a run may switch them)
    skip_header = chunk.header
    for n, line in enumerate(lines, chunk.first_line):
        if not line.strip():
            continue
        if skip_header:
            skip_header = False
            continue
        obj = _parse(n, line)
        try:
            t, event = _event_line(obj, lanes, last_t)
            kv.check(event)
        except ValueError as e:
            raise RecordingError(f"line {n}: {e}") from None
        if event["type"] == LanesEvent.TYPE:
            lanes |= set(event["lanes"])
        out.add(t, event)
        last_t = t
    return out


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
