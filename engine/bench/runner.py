"""Run our engine, one lane (a name and an EngineConfig), on workloads, through the public engine API.

Arrivals follow the engine's clock: requests whose arrival time has come are added
(with their scheduled arrival time, so time spent waiting for a step to end counts as
queueing), the engine steps while it has work, and sleeps until the next arrival
otherwise. Once every request has arrived `draining` is set, so static/dynamic launch
their last partial batch. A warm-up (a few short requests, discarded) runs first.
Each request's priority and tenant go to the engine (its scheduling policy reads them).
With prefix caching on, every workload gets a fresh engine: blocks cached by the warm-up
or an earlier run would serve the measured requests.
"""
from __future__ import annotations

import gc
import time
from collections import deque

from ..config import EngineConfig, dtype_choice, dtype_name
from ..disaggregated import build_engine
from ..llm_engine import LLMEngine
from ..request import SamplingParams
from .control import Cancelled, CpuShare, check_cancel, is_cancelled, report
from ..telemetry.records import RequestRecord, StepSample, LaneRun, request_record, step_sample
from .workloads import Workload

IDLE_TICK_S = 0.002  # sleep between idle steps (static waiting for a full batch, dynamic for its timeout)
WARMUP_TOKENS = 4


def run_engine(workloads: list[Workload], lane: str, engine_cfg: EngineConfig, warmup_requests: int,
               progress=None, cancel=None, sleep=time.sleep) -> list[LaneRun]:
    """One engine for the lane, warmed up, then each (materialized) workload in turn."""
    if engine_cfg.enable_prefix_caching and len(workloads) > 1:
        return [run for w in workloads
                for run in run_engine([w], lane, engine_cfg, warmup_requests, progress, cancel, sleep)]
    report(progress, strategy=lane, stage="load", message=f"loading {engine_cfg.model}")
    eng = build_engine(engine_cfg)
    try:
        check_cancel(cancel)
        report(progress, strategy=lane, stage="warmup")
        warmup(eng, workloads[0], warmup_requests)
        return [run_workload(eng, w, lane, progress, cancel, sleep) for w in workloads]
    finally:
        eng.close()
        del eng
        gc.collect()


def share_pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def warmup(eng: LLMEngine, workload: Workload, n: int) -> None:
    if n <= 0:
        return
    # The first prompts' lengths, reversed: no block they fill can match a measured prompt's prefix.
    prompts = [r.prompt_token_ids[::-1] for r in workload.requests[:n]]
    eng.generate(prompts, SamplingParams(max_tokens=WARMUP_TOKENS, temperature=0.0, ignore_eos=True))


def run_workload(eng: LLMEngine, workload: Workload, lane: str, progress=None, cancel=None,
                 sleep=time.sleep) -> LaneRun:
    if not workload.materialized:
        raise ValueError("materialize() the workload for the model's tokenizer first")
    clock = eng.clock
    pending = deque(sorted(workload.requests, key=lambda r: (r.arrival_s, r.index)))
    rate = workload.params.get("rate")
    total = len(pending)
    specs, scheduled = {}, {}
    index_of = {} if workload.has_tenants else None  # per-step service by request, for per-tenant metrics
    steps: list[StepSample] = []
    done = 0
    gc.collect()
    eng.draining = False
    report(progress, strategy=lane, stage="run", done=0, total=total, rate=rate)
    cpu = CpuShare()
    step_s0, telemetry_s0, graph_steps0 = eng.step_s, eng.telemetry_s, _graph_steps(eng)
    compiles0 = eng.kernel_compiles
    recomputed0 = eng.recomputed_tokens
    t0 = clock()
    try:
        while True:
            if is_cancelled(cancel):
                raise Cancelled("benchmark cancelled")
            now = clock()
            while pending and t0 + pending[0].arrival_s <= now:
                spec = pending.popleft()
                params = SamplingParams(max_tokens=spec.max_tokens, temperature=0.0,
                                        ignore_eos=workload.ignore_eos)
                rid = eng.add_request(spec.prompt_token_ids, params, arrival_s=t0 + spec.arrival_s,
                                      priority=spec.priority, tenant=spec.tenant)
                specs[rid] = spec
                if index_of is not None:
                    index_of[rid] = spec.index
            if not pending:
                eng.draining = True
            if eng.has_unfinished():
                ev = eng.step()
                for rid in ev.admitted:
                    scheduled.setdefault(rid, ev.t_start)
                sample = step_sample(ev, index_of)
                if sample is not None:
                    steps.append(sample)
                else:  # nothing to compute yet: wait for an arrival or a dynamic batch's timeout
                    wait = IDLE_TICK_S if not pending else min(IDLE_TICK_S, t0 + pending[0].arrival_s - clock())
                    if wait > 0:
                        sleep(wait)
                finished = sum(1 for rid in ev.finished if rid in specs)
                if finished:
                    done += finished
                    report(progress, strategy=lane, stage="run", done=done, total=total, rate=rate)
            elif pending:
                wait = t0 + pending[0].arrival_s - clock()
                if wait > 0:
                    sleep(min(wait, 0.1))  # short naps keep the cancel flag responsive
            else:
                break
    except BaseException:
        for rid in specs:
            eng.abort(rid)
        eng.draining = False
        raise
    eng.draining = False
    records: list[RequestRecord] = []
    for rid, spec in specs.items():
        records.append(request_record(spec.index, eng.pop_output(rid), scheduled.get(rid)))
    records.sort(key=lambda r: r.index)
    info = {"kv_blocks": eng.kv_capacity_tokens // eng.cfg.block_size, "block_size": eng.cfg.block_size,
            "kv_capacity_tokens": eng.kv_capacity_tokens, "device": str(eng.runner.device),
            "dtype": dtype_name(eng.runner.dtype), "dtype_why": dtype_choice(eng.cfg.dtype, eng.runner.device)[1],
            "linear": eng.runner.linear, "rate": rate,
            "policy": eng.cfg.scheduling_policy, "prefix_caching": eng.cfg.enable_prefix_caching,
            "speculative": eng.cfg.speculative, "num_speculative_tokens": eng.cfg.num_speculative_tokens,
            "speculative_model": eng.cfg.speculative_model,
            "preemption_mode": eng.cfg.preemption_mode, "disaggregated": eng.cfg.disaggregated,
            "recomputed_tokens": eng.recomputed_tokens - recomputed0,
            "other_cpu_pct": cpu.other_cpu_pct(),
            "telemetry_pct": share_pct(eng.telemetry_s - telemetry_s0, eng.step_s - step_s0),
            "attention": eng.runner.backend, "attention_why": eng.runner.backend_why,
            "cuda_graphs": eng.runner.graphs_state(), "graph_steps": _graph_steps(eng) - graph_steps0,
            "overlap": eng.overlap,
            # the engine's warm-up (before the run; None where it has none) and what the run still compiled
            "warmup": None if eng.warmup is None else eng.warmup.as_dict(),
            "kernel_compiles_in_run": eng.kernel_compiles - compiles0}
    report(progress, strategy=lane, stage="done", done=done, total=total, rate=rate)
    return LaneRun(lane, records, steps, t0, info)


def _graph_steps(eng) -> int:
    """Steps so far that ran through a decode graph bucket (replayed, or eager where not on CUDA)."""
    graphs = eng.runner.graphs
    return sum(graphs.steps.values()) if graphs is not None else 0

