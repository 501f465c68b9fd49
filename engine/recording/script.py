"""A scripted run to record: one preset's lanes (pages/ui/presets.py, plain data) serve its request
stream on a fresh service, recorded from the engines' first event to the stream's last answer."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from ..config import EngineConfig
from ..service import EngineService
from .recorder import start_recording, stop_recording

ROOT = Path(__file__).resolve().parents[2]


def _presets():
    """The playground's presets and their stream runner (no Streamlit in either)."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from pages.ui import preset_stream, presets
    return presets, preset_stream


def record_preset(name: str, out: Path, base: EngineConfig, max_seconds: float = 60.0, log=print) -> dict:
    """Run preset `name`'s stream on its lanes and record it to `out`; returns what was recorded."""
    presets, preset_stream = _presets()
    preset = presets.by_name(name)
    if preset is None:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(p.name for p in presets.PRESETS)}")
    svc = EngineService(base, lanes=preset.lane_configs(base))
    try:
        log(f"loading {base.model} for lanes {', '.join(svc.lane_names)}…")
        svc.wait_ready()
        rec = start_recording(svc, out)
        runner = preset_stream.StreamRunner(svc, preset.stream)
        runner.start()
        done = _wait_done(svc, runner, time.monotonic() + max_seconds)
        stop_recording(svc)
        return {"events": rec.events, "skipped": rec.skipped, "seconds": svc.clock() - rec.t0,
                "requests": runner.submitted, "refused": runner.errors, "complete": done}
    finally:
        svc.stop()


def _wait_done(svc, runner, deadline: float) -> bool:
    """Until every request of the stream has been sent and answered: True; False at the deadline
    (the recording then ends with requests still running)."""
    while time.monotonic() < deadline:
        if not runner.is_alive() and svc.idle():
            return True
        time.sleep(0.05)
    runner.stop()
    return False
