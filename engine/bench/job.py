"""The benchmark page's background run: one per process, progress and cancel from any tab."""
from __future__ import annotations

import threading
import traceback

from engine.bench.config import BenchConfig
from engine.bench.control import Cancelled, Progress
from engine.bench.report import add_ratios
from engine.bench.suite import run_benchmark
from engine.bench.workloads import make_workload, preset
from engine.config import EngineConfig


class BenchJob(threading.Thread):
    def __init__(self, workload: str, scale: float, strategies: list[str], rates: list[float | None] | None,
                 cfg: BenchConfig, service=None, lanes: dict[str, EngineConfig] | None = None):
        """strategies: peers and our strategies (each a lane on cfg.engine); lanes: more named engine
        configurations."""
        super().__init__(daemon=True, name="inflight-bench")
        self.workload = make_workload(preset(workload, scale))
        self.strategies, self.rates, self.cfg, self.svc = strategies, rates, cfg, service
        self.lanes = lanes or {}
        self.cancel = threading.Event()
        self.progress: Progress | None = None
        self.done_per_lane: dict[str, int] = {}
        self.result: dict | None = None
        self.error: str | None = None

    @property
    def total(self) -> int:
        runs = len(self.strategies) + len(self.lanes)
        return len(self.workload) * runs * max(1, len(self.rates or [None]))

    def on_progress(self, p: Progress) -> None:
        self.progress = p
        if p.stage == "run":
            self.done_per_lane[f"{p.strategy}@{p.rate}"] = p.done

    @property
    def fraction(self) -> float:
        return min(1.0, sum(self.done_per_lane.values()) / max(1, self.total))

    def run(self) -> None:
        # The live engines would compete for the same cores: pause them for clean numbers.
        paused_here = self.svc is not None and not self.svc.paused.is_set()
        if paused_here:
            self.svc.pause()
        try:
            res = run_benchmark(self.workload, self.strategies, self.cfg, rates=self.rates,
                                progress=self.on_progress, cancel=self.cancel, lanes=self.lanes)
            add_ratios(res.results)
            self.result = res.to_dict(details=True)
        except Cancelled:
            self.error = "cancelled"
        except Exception as e:  # noqa: BLE001 - shown on the page
            self.error = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        finally:
            if paused_here:
                self.svc.resume()


_current: BenchJob | None = None


def current() -> BenchJob | None:
    return _current


def start(job: BenchJob) -> BenchJob:
    global _current
    if _current is not None and _current.is_alive():
        raise RuntimeError("a benchmark is already running")
    _current = job
    job.start()
    return job
