"""Inflight's benchmark: workloads, lanes of our engine and peers on the same workload, metrics, report.

From Python (e.g. a page running it in a background thread):

    from engine import EngineConfig
    from engine.bench import BenchConfig, preset, make_workload, run_benchmark
    base = EngineConfig(device="cpu")
    res = run_benchmark(make_workload(preset("quick")), "continuous,hf-generate", BenchConfig(engine=base),
                        lanes={"block 128": dataclasses.replace(base, block_size=128)},
                        progress=lambda p: ..., cancel=threading.Event())
    res.results   # one metrics dict per lane and peer (see engine.telemetry.metrics)
"""
from .config import ALL_STRATEGIES, BenchConfig
from .control import Cancelled, Progress
from ..telemetry.metrics import summarize
from ..telemetry.records import RequestRecord, StepSample, LaneRun
from .suite import BenchmarkResult, run_benchmark
from .workloads import (
                        PRESETS,
                        Lengths,
                        RequestClass,
                        RequestSpec,
                        Workload,
                        WorkloadSpec,
                        load_trace,
                        make_workload,
                        materialize,
                        preset,
                        save_trace,
)

__all__ = ["ALL_STRATEGIES", "BenchConfig", "BenchmarkResult", "Cancelled", "Lengths", "PRESETS", "Progress",
           "RequestClass", "RequestRecord", "RequestSpec", "StepSample", "LaneRun", "Workload", "WorkloadSpec",
           "load_trace", "make_workload", "materialize", "preset", "run_benchmark", "save_trace", "summarize"]
