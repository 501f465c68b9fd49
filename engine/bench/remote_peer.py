"""A remote OpenAI-compatible server (vLLM, SGLang, llama.cpp's llama-server, Ollama, our own) as a
benchmark lane: the same materialized workload sent at its arrival times, as token ids, greedy, EOS
ignored, through the service's remote lane (engine/serving/remote/), so it is timed here, at the client,
as the playground's remote lanes are: its TTFT includes the network and the server's queue, and requests
beyond the lane's max_concurrency wait on our side. No step is visible from outside: the metrics that
need steps are None."""
from __future__ import annotations

import time

from ..config import EngineConfig
from ..request import SamplingParams
from ..serving.remote.config import RemoteConfig
from ..serving.service import EngineService
from .control import check_cancel, report
from ..telemetry.records import LaneRun, request_record
from .workloads import Workload

RESULT_TIMEOUT_S = 600.0  # one request, from its arrival


def run_remote(workloads: list[Workload], lane: str, cfg: RemoteConfig, progress=None, cancel=None,
               sleep=time.sleep) -> list[LaneRun]:
    """One service whose only lane is the server, then each workload in turn."""
    svc = EngineService(EngineConfig(device="cpu"), lanes={lane: cfg})
    try:
        svc.wait_ready(60)
        return [_run(svc, w, lane, cfg, progress, cancel, sleep) for w in workloads]
    finally:
        svc.stop()


def _run(svc: EngineService, workload: Workload, lane: str, cfg: RemoteConfig, progress, cancel, sleep) -> LaneRun:
    if not workload.materialized:
        raise ValueError("materialize() the workload for the model's tokenizer first")
    rate = workload.params.get("rate")
    report(progress, strategy=lane, stage="run", done=0, total=len(workload.requests), rate=rate)
    t0, sent = svc.clock(), []
    for spec in sorted(workload.requests, key=lambda r: (r.arrival_s, r.index)):
        check_cancel(cancel)
        wait = t0 + spec.arrival_s - svc.clock()
        if wait > 0:
            sleep(wait)
        params = SamplingParams(max_tokens=spec.max_tokens, temperature=0.0, ignore_eos=workload.ignore_eos)
        (handle,) = svc.submit(spec.prompt_token_ids, params, lanes=[lane], tag="bench")
        sent.append((spec.index, handle))
    records = []
    for done, (index, handle) in enumerate(sent, 1):
        records.append(request_record(index, handle.result(RESULT_TIMEOUT_S), None))
        report(progress, strategy=lane, stage="run", done=done, total=len(sent), rate=rate)
    records.sort(key=lambda r: r.index)
    info = {"remote": cfg.remote, "served_model": cfg.model, "timed_at": "client",
            "max_concurrency": cfg.max_concurrency, "rate": rate, "dtype": None}
    report(progress, strategy=lane, stage="done", done=len(sent), total=len(sent), rate=rate)
    return LaneRun(lane, records, [], t0, info)
