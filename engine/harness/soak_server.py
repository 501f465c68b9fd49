"""The server that `engine.harness.soak` drives: the app's routes over one EngineService, in its own
process (so its memory is measured alone), in room mode, with injected step faults, and a presenter
uploading fuzzed recordings meanwhile.

    python -m engine.harness.soak_server --port P --token T [--model M] [--fault-rate 0.002]
                                       [--uploads-every S --uploads-report FILE]

Step faults exist only here and in tests: `EngineService.step_fault` is never set by the app.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import logging
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import uvicorn

from ..api.server import create_app
from ..api.ws import PING_S
from ..config import EngineConfig
from ..room.access import Access
from ..serving.remote.config import RemoteConfig
from ..serving.service import EngineService, strategy_lanes
from ..workshop.recording import SHIPPED, play_file, stop_replay
from . import fuzz
from .heap_watch import HeapWatch
from .hostile_remote import LANE as HOSTILE_LANE

log = logging.getLogger(__name__)

WS_MAX_BYTES = 2 * 1000 * 1000  # as Streamlit's server.maxMessageSize in .streamlit/config.toml


class StepFaults:
    """Raises in a step with probability `rate`: the engine must end the affected requests with
    finish_reason "error", free their blocks and keep serving."""

    def __init__(self, rate: float, seed: int = 0):
        self.rate, self.rng, self.count = rate, random.Random(seed), 0
        self._lock = threading.Lock()

    def __call__(self, lane: str) -> None:
        with self._lock:
            hit = self.rng.random() < self.rate
            self.count += hit
        if hit:
            raise RuntimeError(f"injected step fault #{self.count} on {lane}")


class Uploads(threading.Thread):
    """Every `every_s`, a fuzzed recording goes through what the page does with an upload (play_file),
    into a stage of its own (a live room's sockets are not switched to it); one that plays runs for a
    moment. Counts what played, what was refused (with its reason) and what failed any other way, in
    `report` after each upload (uvicorn ends this process on SIGTERM without unwinding it)."""

    def __init__(self, every_s: float, report: str, seed: int = 0):
        super().__init__(daemon=True, name="soak-uploads")
        self.every_s, self.report, self.rng = every_s, Path(report), random.Random(seed)
        self.lines = gzip.decompress(SHIPPED.read_bytes()).decode().splitlines()
        self.counts = {"uploads": 0, "uploads_played": 0, "uploads_refused": 0, "uploads_failed": 0}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.rng.expovariate(1 / self.every_s)):
            data, _ = fuzz.recording(self.rng, self.lines)
            stage = SimpleNamespace(replay=None)
            self.counts["uploads"] += 1
            try:
                problem = play_file(stage, data, "fuzzed.jsonl.gz")
                if problem is None:
                    time.sleep(0.5)
                    stop_replay(stage)
                self.counts["uploads_refused" if problem else "uploads_played"] += 1
            except Exception:  # noqa: BLE001 - counted: must not happen
                log.exception("an upload failed other than with its reason")
                self.counts["uploads_failed"] += 1
            self._write()

    def _write(self) -> None:
        part = self.report.with_suffix(".part")
        part.write_text(json.dumps(self.counts))
        part.replace(self.report)


def build_service(model: str | None, token: str, api_key: str, fault_rate: float, device: str = "cpu",
                  split_lane: bool = False, hostile_url: str | None = None, **engine_fields) -> EngineService:
    """split_lane: a disaggregated lane (engine/disaggregated.py) beside the continuous and static ones;
    hostile_url: a remote lane "hostile" served by a HostileRemote there (engine/harness/hostile_remote.py)."""
    cfg = EngineConfig(model=model, device=device, **engine_fields)
    lanes = strategy_lanes(cfg, ("continuous", "static"))
    if split_lane:
        lanes["disaggregated"] = dataclasses.replace(cfg, disaggregated=True)
    if hostile_url:
        lanes[HOSTILE_LANE] = RemoteConfig(hostile_url, "hostile", timeout_s=1.0, max_request_s=3.0)
    svc = EngineService(cfg, lanes=lanes, access=Access(room=True, token=token, api_key=api_key))
    svc.wait_ready(900)
    svc.step_fault = StepFaults(fault_rate) if fault_rate > 0 else None
    return svc


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--api-key", default="soak-viewer-key")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fault-rate", type=float, default=0.002)
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--num-kv-blocks", type=int, default=None)
    ap.add_argument("--split-lane", action="store_true", help="a disaggregated lane too")
    ap.add_argument("--hostile-url", default=None,
                    help=f"a remote lane '{HOSTILE_LANE}' served there (engine/harness/hostile_remote.py's mixed mode)")
    ap.add_argument("--uploads-every", type=float, default=0.0, help="seconds between fuzzed uploads (0: none)")
    ap.add_argument("--uploads-report", default=None, help="write the upload counts here on exit (JSON)")
    ap.add_argument("--heap-report", default=None,
                    help="write tracemalloc's view of the Python heap here every --heap-every seconds (JSON)")
    ap.add_argument("--heap-every", type=float, default=60.0)
    return ap


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    if args.heap_report:
        HeapWatch(args.heap_report, args.heap_every, baseline_after_s=args.heap_every).start()
    svc = build_service(args.model, args.token, args.api_key, args.fault_rate, args.device, args.split_lane,
                        args.hostile_url, max_model_len=args.max_model_len, num_kv_blocks=args.num_kv_blocks)
    uploads = Uploads(args.uploads_every, args.uploads_report) if args.uploads_every > 0 and args.uploads_report \
        else None
    if uploads is not None:
        uploads.start()
    print("soak server ready", flush=True)
    try:
        uvicorn.run(create_app(svc), host="127.0.0.1", port=args.port, log_level="warning",
                    ws_ping_interval=PING_S, ws_ping_timeout=PING_S,
                    ws_max_size=WS_MAX_BYTES)
    finally:
        svc.stop()


if __name__ == "__main__":
    main()
