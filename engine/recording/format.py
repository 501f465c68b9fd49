"""The recording file: gzip JSON lines. The first line is the header; each later line is one event as
/engine/ws sends it, with the service-clock time the hub published it:

    {"format": "inflight-recording", "version": 1, "model": ..., "device": ..., "started_at": ISO time,
     "lanes": {name: config}, "status": the service status when recording began}
    {"t": 12.345, "event": {"type": "step", "lane": "continuous", ...}}
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

FORMAT = "inflight-recording"
VERSION = 1


@dataclass
class Recording:
    header: dict
    events: list[tuple[float, dict]]  # (publish time, wire event), in publishing order

    @property
    def lanes(self) -> list[str]:
        return list(self.header["lanes"])

    @property
    def start(self) -> float:
        return self.header.get("t0", self.events[0][0] if self.events else 0.0)

    @property
    def end(self) -> float:
        return self.events[-1][0] if self.events else self.start

    @property
    def label(self) -> str:
        """How the views name it: what ran, when and where."""
        h = self.header
        return f"Recording of a real run: {h['model']}, {h['started_at'][:10]}, {h['device']}"


class Writer:
    """Writes a recording line by line (flushed by close)."""

    def __init__(self, path: str | Path, header: dict):
        self._f = gzip.open(path, "wt", encoding="utf-8", compresslevel=9)
        self._line({"format": FORMAT, "version": VERSION, **header})

    def event(self, t: float, event: dict) -> None:
        self._line({"t": round(t, 6), "event": event})

    def _line(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._f.close()


def load(path: str | Path) -> Recording:
    """Read a recording; ValueError if it is not one this version reads."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = (json.loads(line) for line in f if line.strip())
        header = next(lines, None)
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError(f"{Path(path).name} is not an Inflight recording")
        if header.get("version") != VERSION:
            raise ValueError(f"{Path(path).name}: recording version {header.get('version')!r}, "
                             f"this Inflight reads version {VERSION}")
        return Recording(header, [(line["t"], line["event"]) for line in lines])
