"""Benchmark metrics: pure functions of a LaneRun (request records and step samples).

Definitions (every time is a difference of one clock; t0 is when the workload started,
i.e. when requests with arrival offset 0 arrive):

- completed: requests that finished with reason "length" or "stop". Only they count below.
- duration_s: last completed finish - t0.
- output_tokens_per_s: useful output tokens of completed requests / duration_s. Tokens a
  padded batch computes past a request's own max_tokens are not counted.
- requests_per_s: completed / duration_s.
- TTFT (time to first token) = first_token_s - arrival_s, queueing included.
- TPOT (time per output token) = (finish_s - first_token_s) / (output_tokens - 1), for
  requests with at least 2 output tokens (the mean inter-token gap after the first).
- e2e latency = finish_s - arrival_s.
- queue wait = scheduled_s - arrival_s (until the request first entered a batch).
- Percentiles p50/p90/p99 are numpy's linear-interpolation percentiles over requests.
- padding_waste_pct = 100 * padding token slots / all computed token slots (prefill +
  decode + padding) over the run. Padding: static's left padding of short prompts, and the
  rows of requests that already finished but are still computed until their batch ends.
- kv_waste_pct = 100 * mean over busy steps (steps that allocate any KV) of
  kv_unused_slots / kv_allocated_slots, measured after each step: slots held by requests
  (allocated blocks x block size, or a generate() batch's padded cache) that hold no useful
  token. Paged continuous batching wastes only the unfilled tail of each request's last
  block; static batching reserves prompt + max_tokens per row up front.
- mean_batch_size: mean over busy steps of the rows in the forward pass (finished rows that
  static batching still computes included); mean_active_batch_size counts only rows that
  computed a useful token.
- goodput: completed requests meeting the SLO (TTFT <= slo_ttft_s and TPOT <= slo_tpot_s; an
  unset SLO always holds, a 1-token request has no TPOT and meets that part) per second of
  duration_s; goodput_output_tokens_per_s counts their output tokens; slo_attainment_pct is
  their share of all requests.
- telemetry_pct: 100 * time our engine spent building StepEvents / its whole step time
  (telemetry included) during the run; None for peers.
- queue_wait_max_s: the longest queue wait of a completed request.
- prefill_tokens: prompt tokens computed over the run (the prefill entries' tokens, recomputation
  after preemption included, tokens served from the prefix cache excluded).
- preemptions, recomputed_tokens, swapped_blocks, swap_mb, swap_ms: requests preempted, tokens computed
  again after a preemption dropped their KV (preemption_mode "recompute", or "swap" with a full host
  pool; prefix cache hits excluded), and swap preemption's copies out and in (blocks, MB, ms).
- max_rows, max_step_tokens: the most rows, and the most token slots (padding included), one step computed.
- step_time_drift: how much slower the lane's iterations of one size got during the run: over decode-only
  steps grouped by their row count, the median step time of each group's last third / that of its first
  third, the largest over groups with at least STEP_DRIFT_MIN_STEPS steps (None: no such group). A machine
  that got busy shows here; the work did not change (the KV it reads grows a little).
- prefix_hit_rate: prompt tokens served from the prefix cache / prompt tokens looked up in it,
  summed over steps (vLLM's definition; every admission is a lookup); None when nothing was looked up.
- classes (workloads whose requests carry a class, e.g. short/long): per class, its request count
  and the TTFT, E2E and queue-wait percentiles above plus queue_wait_max_s, over its completed requests.
- tenants, backlogged_s, jain_index (workloads whose requests carry a tenant, runs that record
  per-request service per step): see fairness.py.
Metrics that need step samples are None for runs without them (hf-cb).
"""
from __future__ import annotations

import numpy as np

from ..slo import meets_slo, tpot_s
from .fairness import tenant_service
from .records import LaneRun, RequestLabel, RequestRecord, StepSample

PERCENTILES = (50, 90, 99)
DONE = ("length", "stop")


def percentiles(values: list[float], prefix: str) -> dict[str, float | None]:
    """{prefix_p50_s, prefix_p90_s, prefix_p99_s, prefix_mean_s}; None when there are no values."""
    out: dict[str, float | None] = {}
    arr = np.asarray(values, dtype=float)
    for p in PERCENTILES:
        out[f"{prefix}_p{p}_s"] = float(np.percentile(arr, p)) if arr.size else None
    out[f"{prefix}_mean_s"] = float(arr.mean()) if arr.size else None
    return out


def ttft(r: RequestRecord) -> float | None:
    return None if r.first_token_s is None else r.first_token_s - r.arrival_s


def tpot(r: RequestRecord) -> float | None:
    return tpot_s(r.first_token_s, r.finish_s, r.output_tokens)


def e2e(r: RequestRecord) -> float | None:
    return None if r.finish_s is None else r.finish_s - r.arrival_s


def queue_wait(r: RequestRecord) -> float | None:
    return None if r.scheduled_s is None else r.scheduled_s - r.arrival_s


def meets(r: RequestRecord, slo_ttft_s: float | None, slo_tpot_s: float | None) -> bool:
    return meets_slo(ttft(r), tpot(r), slo_ttft_s, slo_tpot_s)


def padding_waste_pct(steps: list[StepSample]) -> float | None:
    total = sum(s.computed_tokens for s in steps)
    return 100.0 * sum(s.padding_tokens for s in steps) / total if total else None


def kv_waste_pct(steps: list[StepSample]) -> float | None:
    ratios = [s.kv_unused_slots / s.kv_allocated_slots for s in steps
              if s.kv_allocated_slots and s.kv_unused_slots is not None]
    return 100.0 * float(np.mean(ratios)) if ratios else None


def latencies(done: list[RequestRecord]) -> dict:
    """TTFT, E2E and queue-wait percentiles of completed requests, and their longest queue wait."""
    res: dict = {}
    for name, fn in (("ttft", ttft), ("e2e", e2e), ("queue_wait", queue_wait)):
        res.update(percentiles([v for v in map(fn, done) if v is not None], name))
    res["queue_wait_max_s"] = max((v for v in map(queue_wait, done) if v is not None), default=None)
    return res


def class_metrics(done: list[RequestRecord], specs: dict[int, RequestLabel]) -> dict:
    """{class: {"requests": n, **latencies}} for the classes the workload names, in order."""
    names = list(dict.fromkeys(s.cls for s in specs.values() if s.cls is not None))
    return {c: {"requests": sum(1 for s in specs.values() if s.cls == c),
                **latencies([r for r in done if specs[r.index].cls == c])} for c in names}


def prefix_metrics(steps: list[StepSample]) -> dict:
    known = [s for s in steps if s.prefix_queries is not None]  # peers have no prefix cache
    queries, hits = sum(s.prefix_queries for s in known), sum(s.prefix_hits for s in known)
    return {"prefill_tokens": sum(s.prefill_tokens for s in steps) if steps else None,
            "prefix_queries": queries if known else None, "prefix_hits": hits if known else None,
            "prefix_hit_rate": hits / queries if queries else None}


def spec_metrics(steps: list[StepSample]) -> dict:
    """Speculative decoding: draft tokens, the share accepted, and tokens gained per decode row and step
    (1 without drafts); None for peers."""
    known = [s for s in steps if s.drafted is not None]
    drafted, accepted = sum(s.drafted for s in known), sum(s.accepted for s in known)
    rows = sum(s.decode_rows for s in known)
    return {"draft_tokens": drafted if known else None, "accepted_tokens": accepted if known else None,
            "acceptance_rate": accepted / drafted if drafted else None,
            "tokens_per_decode_row": (rows + accepted) / rows if rows else None}


def preemption_metrics(run: LaneRun) -> dict:
    """Preemptions, the tokens computed again after a preemption dropped them, and swap preemption's
    copies (blocks out and in, MB, ms); None for peers."""
    known = [s for s in run.steps if s.preempted is not None]
    if not known:
        return {"preemptions": None, "recomputed_tokens": None, "swapped_blocks": None, "swap_mb": None,
                "swap_ms": None}
    return {"preemptions": sum(s.preempted for s in known),
            "recomputed_tokens": run.info.get("recomputed_tokens"),
            "swapped_blocks": sum(s.swapped_blocks for s in known),
            "swap_mb": sum(s.swap_bytes for s in known) / 1e6,
            "swap_ms": 1000.0 * sum(s.swap_s for s in known)}


def handoff_metrics(run: LaneRun) -> dict:
    """A disaggregated lane: the KV copied from its prefill pool to its decode pool (MB, ms); None else."""
    if not (run.info.get("disaggregated") or any(s.handoff_bytes for s in run.steps)):  # the cards' runs: no info
        return {"handoff_mb": None, "handoff_ms": None}
    return {"handoff_mb": sum(s.handoff_bytes or 0 for s in run.steps) / 1e6,
            "handoff_ms": 1000.0 * sum(s.handoff_s or 0 for s in run.steps)}


def breakdowns(run: LaneRun, done: list[RequestRecord], specs: list[RequestLabel] | None) -> dict:
    """Per-class and per-tenant metrics, for workloads whose requests carry those labels."""
    by_index = {s.index: s for s in specs or []}
    res: dict = {}
    if any(s.cls is not None for s in by_index.values()):
        res["classes"] = class_metrics(done, by_index)
    if any(s.tenant is not None for s in by_index.values()) and any(s.served is not None for s in run.steps):
        res.update(tenant_service(run.requests, run.steps, {i: str(s.tenant) for i, s in by_index.items()}))
    return res


STEP_DRIFT_MIN_STEPS = 9


def step_time_drift(steps) -> float | None:
    """The largest slowdown of same-sized decode steps from the first to the last third of the run."""
    by_rows: dict[int, list[float]] = {}
    for s in steps:
        if s.decode_tokens and not s.prefill_tokens:
            by_rows.setdefault(s.rows, []).append(s.t_end - s.t_start)
    drifts = []
    for times in by_rows.values():
        if len(times) >= STEP_DRIFT_MIN_STEPS:
            third = len(times) // 3
            early, late = float(np.median(times[:third])), float(np.median(times[-third:]))
            if early > 0:
                drifts.append(late / early)
    return max(drifts, default=None)


def summarize(run: LaneRun, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
              specs: list[RequestLabel] | None = None) -> dict:
    """Every metric of one run as a JSON-ready dict (see the module docstring); `specs`, the run's requests
    labelled (RequestLabels, or the benchmark's RequestSpecs: anything with index, cls and tenant), give the
    per-class and per-tenant breakdowns."""
    done = [r for r in run.requests if r.finish_reason in DONE and r.finish_s is not None]
    duration = max((r.finish_s for r in done), default=run.t0) - run.t0
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    out_tokens = sum(r.output_tokens for r in done)
    good = [r for r in done if meets(r, slo_ttft_s, slo_tpot_s)]
    steps = run.steps
    res = {
        "strategy": run.lane,
        "num_requests": len(run.requests),
        "completed": len(done),
        "failed": len(run.requests) - len(done),
        "duration_s": duration,
        "output_tokens": out_tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in done),
        "output_tokens_per_s": rate(out_tokens),
        "requests_per_s": rate(len(done)),
    }
    res.update(latencies(done))
    res.update(percentiles([v for v in map(tpot, done) if v is not None], "tpot"))
    res.update({
        "padding_waste_pct": padding_waste_pct(steps),
        "kv_waste_pct": kv_waste_pct(steps),
        "mean_batch_size": float(np.mean([s.rows for s in steps])) if steps else None,
        "mean_active_batch_size": float(np.mean([s.active_rows for s in steps])) if steps else None,
        "num_steps": len(steps) if steps else None,
        "max_rows": max(s.rows for s in steps) if steps else None,
        "max_step_tokens": max(s.computed_tokens for s in steps) if steps else None,
        "mean_step_ms": 1000.0 * float(np.mean([s.t_end - s.t_start for s in steps])) if steps else None,
        "busy_s": float(sum(s.t_end - s.t_start for s in steps)) if steps else None,
        "step_time_drift": step_time_drift(steps),
        # share of our engine's step time spent building StepEvents (None for peers)
        "telemetry_pct": run.info.get("telemetry_pct"),
        "slo_ttft_s": slo_ttft_s,
        "slo_tpot_s": slo_tpot_s,
        "goodput_requests_per_s": rate(len(good)),
        "goodput_output_tokens_per_s": rate(sum(r.output_tokens for r in good)),
        "slo_attainment_pct": 100.0 * len(good) / len(run.requests) if run.requests else None,
        **prefix_metrics(steps),
        **spec_metrics(steps),
        **preemption_metrics(run),
        **handoff_metrics(run),
        **breakdowns(run, done, specs),
    })
    return res
