"""Where a long-running server's Python memory goes: tracemalloc snapshots, compared with one taken once
the server has warmed up, written as JSON every so often (the soak's --heap-report).

Each report holds the Python heap now and at its peak, and the source lines whose allocations grew most
since the baseline (size, count). It sees what Python allocates (events, buffers, dicts, strings), not
what torch or other native code allocates: an RSS that grows while this stays flat points there.
"""
from __future__ import annotations

import json
import threading
import time
import tracemalloc
from pathlib import Path

FRAMES = 6   # of each allocation's traceback, kept (more costs memory and time)
TOP = 20     # lines reported


class HeapWatch(threading.Thread):
    def __init__(self, report: str, every_s: float = 60.0, baseline_after_s: float = 60.0):
        super().__init__(daemon=True, name="heap-watch")
        self.report, self.every_s, self.baseline_after_s = Path(report), every_s, baseline_after_s
        self.samples: list[dict] = []
        self.halt = threading.Event()

    def run(self) -> None:
        tracemalloc.start(FRAMES)
        t0 = time.monotonic()
        if self.halt.wait(self.baseline_after_s):
            return
        baseline = tracemalloc.take_snapshot()
        while not self.halt.wait(self.every_s):
            self.samples.append(self._sample(baseline, time.monotonic() - t0))
            self._write()

    @staticmethod
    def _sample(baseline, elapsed: float) -> dict:
        current, peak = tracemalloc.get_traced_memory()
        grown = tracemalloc.take_snapshot().compare_to(baseline, "traceback")
        return {"t_s": round(elapsed, 1), "python_mb": round(current / 2**20, 1), "python_peak_mb": round(peak / 2**20, 1),
                "grown": [{"kb": round(d.size_diff / 1024, 1), "count": d.count_diff,
                           "where": [f"{f.filename}:{f.lineno}" for f in d.traceback]}
                          for d in grown[:TOP] if d.size_diff > 0]}

    def _write(self) -> None:
        part = self.report.with_suffix(".part")
        part.write_text(json.dumps({"samples": self.samples}, indent=1))
        part.replace(self.report)
