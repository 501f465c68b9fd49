"""What folding a recorded run's events costs each reader the pages share (the narration, the live metrics, the
KV page's statistics and roofline window): microseconds a step, and milliseconds per second of the run.

    python docs/perf/2026-11-29-tab-server/fold_bench.py docs/perf/2026-11-27-h100-socket/gpu_socket.jsonl.gz

(the H100 run of two lanes of 256 rows). Best of three folds of the whole recording, on this machine's Python.
"""
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from engine.telemetry.kv_stats import KVStats  # noqa: E402
from engine.telemetry.live_metrics import LiveMetrics  # noqa: E402
from engine.telemetry.roofline_window import RooflineWindow  # noqa: E402
from engine.workshop.narration import Narrator  # noqa: E402
from engine.workshop.recording import load  # noqa: E402
from narration_checker import typed  # noqa: E402  (a recording's wire events as the hub holds them)


def main(path: str) -> None:
    items = typed([event for _, event in load(path).events])
    steps = [i for i in items if i.TYPE == "step"]
    span = steps[-1].event.t_end - steps[0].event.t_start
    print(f"{len(items)} events, {len(steps)} steps over {span:.1f} s of run")
    for reader in (Narrator, LiveMetrics, KVStats, RooflineWindow):
        best = float("inf")
        for _ in range(3):
            r, t = reader(), time.perf_counter()
            for item in items:
                r.on_event(item)
            best = min(best, time.perf_counter() - t)
        print(f"{reader.__name__:15s} {best / len(steps) * 1e6:7.1f} us a step, "
              f"{best / span * 1e3:6.1f} ms per s of run")


if __name__ == "__main__":
    main(sys.argv[1])
