"""What the live views show: the service's engines, or a recording the service is replaying.

`svc.replay` holds the replay (None: live). /engine/ws serves `source(svc)`; a socket opened on one
source closes when the source changes, and its client reconnects to the other. The landing page plays
the shipped recording while the engines load, and the replay ends itself once they are ready.
"""
from __future__ import annotations

import threading
import weakref
from pathlib import Path

from ...paths import ASSETS
from .format import Recording, load
from .replayer import Replayer

SHIPPED = ASSETS / "recordings" / "continuous_vs_static.jsonl.gz"
_lock = threading.Lock()
_served = weakref.WeakSet()  # services whose engines have been ready: their later loads are lane changes


def source(svc):
    """Whose events and status the views get: the replay while one plays, else the service."""
    r = svc.replay
    return r if r is not None and r.active else svc


def play(svc, recording: Recording, **kw) -> Replayer:
    """Replay `recording` in the views (Replayer's keywords: speed, loop, until); ends any other replay."""
    stop_replay(svc)
    svc.replay_error = None
    r = Replayer(recording, **kw)
    r.on_stop = lambda done: _detach(svc, done)
    svc.replay = r
    return r.start()


def play_file(svc, source: bytes | Path, name: str) -> str | None:
    """Play a recording file (an upload's bytes, or a path) in the views once all of it has been checked;
    None, or why it cannot be played ("Cannot play NAME: line N: reason"), the views left as they were."""
    try:
        recording = load(source)
        recording.check_start()
    except ValueError as e:  # not gzip, not JSON, not a recording, past a bound, an event off the contract
        return f"Cannot play {name}: {e}"
    r = play(svc, recording)
    if r.error is None:
        return None
    svc.replay_error = None  # (said here instead)
    return f"Cannot play {name}: {r.error}"


def stop_replay(svc) -> None:
    r = svc.replay
    if r is not None:
        r.stop()
        _detach(svc, r)


def _detach(svc, r: Replayer) -> None:
    if svc.replay is r:
        svc.replay = None
        if r.error:
            svc.replay_error = f"The replay stopped: {r.error}"


def loading(svc) -> bool:
    """Some engine is still loading its model (none has failed)."""
    engines = svc.status()["engines"].values()
    return any(not e["ready"] for e in engines) and not any(e["error"] for e in engines)


def play_while_loading(svc, path: Path = SHIPPED) -> Replayer | None:
    """The shipped recording, looping until the engines are ready, on a fresh start only (a scenario's
    lanes loading later once flashed the recording); returns what plays (None: live). A landing replay
    whose engines are ready is ended here too, not only by its thread's next check, so the page that
    notices the engines are ready draws them."""
    with _lock:
        r, busy = svc.replay, loading(svc)
        if not busy:
            _served.add(svc)
        if r is None and path.exists() and busy and svc not in _served:
            play(svc, load(path), loop=True, until=lambda: not loading(svc))
        elif r is not None and r.until is not None and r.until():
            stop_replay(svc)
        return svc.replay
