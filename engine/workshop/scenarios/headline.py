"""The number a scenario is about: which of the live metrics (engine/telemetry/live_metrics.py) its lesson
shows, how each reads, and the run's one-line headline once it has ended ("static needed 2.3x the time
continuous took"). Pure data and functions: the page draws them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    key: str                 # a key of a lane's live summary
    label: str
    unit: str = " s"
    scale: float = 1.0
    digits: int = 2
    higher_is_better: bool = False
    help: str = ""
    per: str | None = None   # the summary holds one value per ...: "tenant"

    @property
    def title(self) -> str:
        return self.label if self.per is None else f"{self.label} per {self.per}"

    def text(self, value) -> str:
        return "–" if value is None else f"{value * self.scale:,.{self.digits}f}{self.unit}"


METRICS = {m.key: m for m in (
    Metric("duration_s", "Time for the run", help="From the run's first arrival to its last answer"),
    Metric("output_tokens_per_s", "Throughput", " tok/s", digits=1, higher_is_better=True,
           help="Output tokens per second of finished requests"),
    Metric("ttft_p50_s", "TTFT p50", help="Time to first token, queueing included: the median request"),
    Metric("ttft_p99_s", "TTFT p99", help="Time to first token: nearly the slowest request"),
    Metric("queue_wait_max_s", "Longest wait", help="The longest a request waited before its first iteration"),
    Metric("max_token_wait_s", "Longest token wait",
           help="The longest a request waited between two of its tokens (paused time left out)"),
    Metric("urgent_ttft_s", "Urgent request's TTFT", help="Time to first token of the request with priority below 0"),
    Metric("tenant_ttft_p50_s", "TTFT p50", help="The median time to first token of each tenant's requests",
           per="tenant"),
    Metric("jain_index", "Fairness (Jain)", "", digits=2, higher_is_better=True,
           help="Jain's index of the tenants' service while all wanted more: 1 is equal, 1/n one tenant takes all"),
    Metric("preemptions", "Preemptions", "", digits=0,
           help="Requests evicted from the KV pool: to be recomputed, or swapped out to the host pool"),
    Metric("prefill_tokens", "Prefill tokens", "", digits=0,
           help="Prompt tokens computed, recomputation after preemption included (prefix cache hits not)"),
    Metric("swap_mb", "KV swapped", " MB", digits=1,
           help="Swap preemption: KV copied to the host pool and back"),
    Metric("prefix_hit_rate", "Prefix cache hits", " %", 100.0, 0, True,
           help="Prompt tokens served from the prefix cache / prompt tokens looked up"),
    Metric("kv_waste_pct", "KV waste", " %", digits=1, help="Allocated KV slots holding no token"),
    Metric("tpot_p50_s", "TPOT p50", " ms", 1000.0, 0, help="Time per output token after the first: the median request"),
    Metric("slo_attainment_pct", "SLO met", " %", digits=0, higher_is_better=True,
           help="Requests that met the lane's TTFT and TPOT SLOs, of all this run's requests"),
    Metric("goodput_requests_per_s", "Goodput", " req/s", digits=2, higher_is_better=True,
           help="Requests per second that met the lane's TTFT and TPOT SLOs (DistServe's goodput)"),
    Metric("acceptance_rate", "Drafts accepted", " %", 100.0, 0, True,
           help="Speculative decoding: draft tokens the model's own choices confirmed / draft tokens"),
    Metric("tokens_per_decode_row", "Tokens per row-step", "", digits=2, higher_is_better=True,
           help="Tokens a decoding row gains per step: 1 without speculation, 1 + accepted drafts with it"),
)}


def check_keys(keys) -> tuple[str, ...]:
    """The keys if every one names a metric (ValueError naming the first that does not)."""
    for k in keys:
        if k not in METRICS:
            raise ValueError(f"{k!r} is not a live metric; metrics: {', '.join(METRICS)}")
    return tuple(keys)


def values(metric: Metric, summary: dict) -> list[tuple[str | None, float | None]]:
    """(part, value) pairs: (None, its value), or (tenant, value) per tenant for a per-tenant metric."""
    v = summary.get(metric.key)
    return sorted(v.items()) if metric.per is not None and isinstance(v, dict) else [(None, v)]


def run_headline(metric: Metric, summaries: dict[str, dict]) -> str | None:
    """The run's result in words on its first metric, two lanes compared: "static needed 2.31x the time
    continuous took", "dynamic's TTFT p50 was 3.10x continuous's". None when it does not apply."""
    known = {lane: s.get(metric.key) for lane, s in summaries.items()}
    known = {lane: v for lane, v in known.items() if isinstance(v, (int, float)) and v > 0}
    if len(known) != 2:
        return None
    (a, va), (b, vb) = sorted(known.items(), key=lambda kv: kv[1], reverse=not metric.higher_is_better)
    r = va / vb if not metric.higher_is_better else vb / va
    if metric.key == "duration_s":
        return f"{a} needed {r:.2f}x the time {b} took for the same requests{_made_of(summaries[a], summaries[b])}"
    if metric.key == "output_tokens_per_s":
        return f"{b}'s {metric.label} was {r:.2f}x {a}'s{_made_of(summaries[b], summaries[a], per_token=True)}"
    if metric.higher_is_better:
        return f"{b}'s {metric.label} was {r:.2f}x {a}'s"
    return f"{a}'s {metric.label} was {r:.2f}x {b}'s"


def _made_of(a: dict, b: dict, per_token: bool = False) -> str:
    """What a ratio of times is made of: iterations (per_token, for a ratio of throughputs: output tokens
    per iteration), and time per iteration, where a busy machine shows."""
    na, nb, ma, mb = a.get("num_steps"), b.get("num_steps"), a.get("mean_step_ms"), b.get("mean_step_ms")
    ta, tb = (a.get("output_tokens"), b.get("output_tokens")) if per_token else (na, nb)
    if not (na and nb and ma and mb and ta and tb):
        return ""
    if per_token:
        pa, pb = ta / na, tb / nb
        count = f"{pa / pb:.2f}x the output tokens per iteration ({pa:,.1f} vs {pb:,.1f})"
    else:
        count = f"{na / nb:.2f}x the iterations ({na:,} vs {nb:,})"
    return f": {count} at {ma / mb:.2f}x the time per iteration ({ma:,.0f} vs {mb:,.0f} ms)"


def drift_warning(summaries: dict[str, dict], bound: float = 1.5) -> str | None:
    """A caution when a lane's same-sized iterations got much slower during the run (a busy machine),
    which inflates its times: compare iterations then. None when every lane kept its pace."""
    drifted = {lane: d for lane, s in summaries.items() if (d := s.get("step_time_drift")) and d >= bound}
    if not drifted:
        return None
    lanes = ", ".join(f"{lane}'s {d:.1f}x" for lane, d in drifted.items())
    return (f"Iterations of the same size got slower during this run ({lanes} from its first third to its "
            "last): the machine got busier, and times and ratios built on them grew with it. Iteration "
            "counts are not affected.")
