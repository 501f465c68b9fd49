"""A scripted run to record: one shipped scenario's lanes (assets/scenarios/) serve its request stream on
a fresh service, recorded from the engines' first event to the stream's last answer."""
from __future__ import annotations

import time
from pathlib import Path

from ...config import EngineConfig
from ...serving.service import EngineService
from ..scenarios.catalog import by_title, shipped
from ..scenarios.runner import StreamRunner
from .recorder import start_recording, stop_recording


def record_scenario(title: str, out: Path, base: EngineConfig, max_seconds: float = 60.0, log=print) -> dict:
    """Run scenario `title`'s stream on its lanes and record it to `out`; returns what was recorded."""
    scenario = by_title(title)
    if scenario is None:
        raise ValueError(f"unknown scenario {title!r}; known: {', '.join(s.title for s in shipped())}")
    svc = EngineService(base, lanes=scenario.lane_configs(base))
    try:
        log(f"loading {base.model} for lanes {', '.join(svc.lane_names)}…")
        svc.wait_ready()
        rec = start_recording(svc, out)
        runner = StreamRunner(svc, scenario)
        runner.start()
        done = _wait_done(svc, runner, time.monotonic() + max_seconds)
        stop_recording(svc)
        return {"events": rec.events, "skipped": rec.skipped, "seconds": svc.clock() - rec.t0,
                "requests": runner.submitted, "refused": list(runner.errors), "complete": done}
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
