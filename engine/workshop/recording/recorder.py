"""Record every event the service publishes, as /engine/ws sends them, to a recording file.

A thread follows the hub with its own cursor (in publishing order, like a socket client) and writes
each event with the service-clock time it read it, so a replay keeps the pacing. It wakes on every
publish; a recorder that fell a whole ring buffer behind would count what it lost in `skipped`. Every
few MiB it starts a new chunk (format.py), which opens with the lanes as they are and each KV pool's
tables whole. It stops itself (`full`) before the file grows past what a reader takes (format.py's
bounds), so it stays playable.
"""
from __future__ import annotations

import os
import threading
from datetime import datetime, timezone
from pathlib import Path

from ...events import LanesEvent, StepMessage
from ...kv_wire import KEY, KvSync
from ...serving.service import lane_dict
from .format import Writer

WAIT_S = 0.1  # how soon a stop is noticed while nothing is published


class Recorder:
    def __init__(self, svc, path: str | Path):
        self.svc, self.path = svc, Path(path)
        self.events = 0
        self.skipped = 0
        self.full = False  # stopped itself before growing past what a reader takes (format.py's bounds)
        self._cursor = svc.hub.head
        self._kv = KvSync()
        self._halt = threading.Event()
        header = header_of(svc)
        self.t0 = header["t0"]  # service clock when recording began
        self._writer = Writer(self.path, header)
        # a replay learns its lanes from the first event (of each chunk), as a live view does from a `lanes` event
        self._lanes = LanesEvent(lanes=lane_dicts(svc)).to_dict()
        self._write(svc.clock(), self._lanes)
        self._thread = threading.Thread(target=self._run, daemon=True, name="inflight-recorder")
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.is_set():
            self._drain(WAIT_S)
        self._drain(None)  # what was published before the stop
        self._writer.close()

    def _drain(self, timeout: float | None) -> None:
        batch = self.svc.hub.read(self._cursor, timeout=timeout)
        t = self.svc.clock()
        self._cursor, self.skipped = batch.cursor, self.skipped + batch.skipped
        if batch.skipped:
            self._kv.reset()
        for _, event in batch.events:
            if not self._writer.room():
                self.full = True
                self._halt.set()
                return
            if self._writer.chunk_full:
                self._new_chunk(t)
            wire = self._wire(event)
            if event.TYPE == LanesEvent.TYPE:
                self._lanes = wire
            self._write(t, wire)

    def _write(self, t: float, wire: dict) -> None:
        self._writer.event(t, wire)
        self.events += 1

    def _new_chunk(self, t: float) -> None:
        """A chunk a replay can start from: the lanes as they are, then each KV pool's tables whole."""
        self._writer.new_chunk()
        self._kv.reset()
        self._write(t, self._lanes)

    def _wire(self, event) -> dict:
        """As a socket client that started with the recording gets it: each KV pool's first step event
        (and the first after a gap) with its tables whole, changes after that."""
        if event.TYPE == StepMessage.TYPE and self._kv.form(event) == KEY:
            return event.key_wire()
        return event.wire()

    @property
    def active(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> Path:
        """Finish the file (every event published so far is in it)."""
        self._halt.set()
        self._thread.join()
        return self.path


def lane_dicts(svc) -> dict[str, dict]:
    return {name: lane_dict(cfg) for name, cfg in svc.lanes.items()}


def header_of(svc) -> dict:
    status = svc.status()
    return {"model": svc.cfg.model, "device": device_label(status),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "t0": svc.clock(), "lanes": lane_dicts(svc), "status": status}


def device_label(status: dict) -> str:
    """What the engines ran on, for people: the GPU's name, or the CPU and its cores."""
    devices = {e.get("device") for e in status["engines"].values()} - {None}
    device = sorted(devices)[0] if devices else "unknown device"
    if device.startswith("cuda"):
        import torch
        return torch.cuda.get_device_name(torch.device(device))
    if device == "cpu":
        return f"CPU, {os.cpu_count()} cores"
    return device


def start_recording(svc, path: str | Path) -> Recorder:
    """The service's recorder (one at a time): a running one is finished first."""
    stop_recording(svc)
    svc.recorder = Recorder(svc, path)
    return svc.recorder


def stop_recording(svc) -> Path | None:
    rec, svc.recorder = svc.recorder, None
    return None if rec is None else rec.stop()
