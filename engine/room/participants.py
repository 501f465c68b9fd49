"""The room's participants: people who joined through /join, each with a short display name.

A name is plain text (the views set it with textContent, never as HTML): trimmed, inner runs of
whitespace made one space, control and formatting characters refused, at most MAX_NAME_CHARS long.
The tally is keyed by client (its IP address in a room), so a phone that renames itself stays one
participant. The presenter's page lists the names and status() carries only the counts; each request's
name still travels on its `request` event, since the projector labels the request with it.
"""
from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass

MAX_NAME_CHARS = 24
MAX_TRACKED = 10_000  # beyond this the quietest participants are forgotten


def clean_name(name) -> str:
    """The name as it will be shown, or ValueError saying why it cannot be."""
    if not isinstance(name, str):
        raise ValueError("name must be a string")
    name = " ".join(name.split())
    if not name:
        raise ValueError("please give a name")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"a name has at most {MAX_NAME_CHARS} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in name):
        raise ValueError("the name holds characters that cannot be shown")
    return name


@dataclass
class Participant:
    name: str
    requests: int
    last_s: float  # service clock of the latest request


class Participants:
    """Thread-safe tally: client key -> its latest name and how many requests it sent."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by: dict[str, Participant] = {}

    def count(self, key: str, name: str, t: float) -> None:
        with self._lock:
            p = self._by.get(key)
            if p is None:
                if len(self._by) >= MAX_TRACKED:
                    del self._by[min(self._by, key=lambda k: (self._by[k].requests, self._by[k].last_s))]
                p = self._by[key] = Participant(name, 0, t)
            p.name, p.requests, p.last_s = name, p.requests + 1, t

    def summary(self) -> dict:
        """The counts anyone may see."""
        with self._lock:
            return {"participants": len(self._by), "requests": sum(p.requests for p in self._by.values())}

    def table(self) -> list[Participant]:
        """Names and counts, busiest first (for the presenter)."""
        with self._lock:
            rows = [Participant(p.name, p.requests, p.last_s) for p in self._by.values()]
        return sorted(rows, key=lambda p: (-p.requests, -p.last_s))
