"""The playground's metric cards: one column per lane, for the current run (pages/ui/run_metrics.py),
the running scenario's own numbers first and, once its run has ended, its result in one line."""
from __future__ import annotations

import streamlit as st

from engine.telemetry.live_metrics import ratio
from engine.telemetry.cost import usd_per_million_tokens
from engine.workshop.scenarios.catalog import running_scenario
from engine.workshop.scenarios.headline import METRICS, drift_warning, run_headline, values

from .cards import Card, show_cards
from .polled import polled
from .price import current as current_price
from .run_metrics import run_label, run_metrics, run_summary


def fmt(v, unit="", scale=1.0, digits=1):
    return "–" if v is None else f"{v * scale:.{digits}f}{unit}"


@polled(1.0)
def metric_cards(svc, lanes: list[str]) -> None:
    with run_metrics(svc) as m:  # (shared with the other sessions: copies out)
        now = svc.clock()
        summary = {lane: dict(r) for lane, r in run_summary(svc, m).items()}
        label, title, ended, skipped = run_label(m, now), m.run_title, m.ended(now), m.skipped
    shown = [s for s in lanes if s in summary] or list(summary)
    st.caption(label)
    if not shown:
        st.info("Metrics appear as soon as the first request of this run finishes.")
        return
    other = {shown[0]: shown[1], shown[1]: shown[0]} if len(shown) == 2 else {}  # each lane vs the other
    for r in summary.values():
        r["usd_per_million_output_tokens"] = usd_per_million_tokens(r["output_tokens_per_s"], current_price())
    scenario = running_scenario(svc.wanted_lanes, svc.cfg)
    keys = scenario.headline if scenario is not None and title == scenario.title else ()
    result = _result(keys, {s: summary[s] for s in shown}) if ended else None
    in_flight = sum(summary[s]["in_flight"] for s in shown)  # while any, a lesson's figures are not final
    columns = [(s, lane_cards(summary[s], other.get(s), summary.get(other.get(s)), keys,
                              s in svc.lanes and svc.lanes[s].is_remote, in_flight)) for s in shown]
    show_cards(columns, result, large=st.session_state.get("large_text", False))
    drift = drift_warning({s: summary[s] for s in shown})
    if drift:
        st.caption(f"⚠ {drift}")
    if skipped:
        st.caption(f"These figures fell behind: {skipped:,} engine events went by unread, so they leave "
                   "some requests out.")


def _result(keys: tuple[str, ...], summaries: dict[str, dict]) -> str | None:
    """The ended run's headline on the first of its metrics that compares two lanes."""
    for key in keys:
        line = run_headline(METRICS[key], summaries)
        if line is not None:
            return f"Run finished: {line}."
    return None


def versus(r: dict, other_name: str | None, other: dict | None, key: str, higher_is_better: bool) -> dict:
    """The card's ratio against the other lane ("1.80x vs static") and whether that is good; none where
    either is 0 (a recompute lane's "KV swapped 0.0 MB, 0.00x", green, said nothing true)."""
    a, b = r.get(key), (other or {}).get(key)
    vs = ratio(a, b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a and b else None
    if vs is None:
        return {}
    good = vs >= 1 if higher_is_better else vs <= 1
    return {"delta": f"{vs:.2f}x vs {other_name}", "tone": "up" if good else "down"}


# what a remote server's requests, timed at this client, cannot tell
ENGINE_ONLY = ("Longest token wait", "Padding waste", "KV waste", "Mean batch", "Mean step", "Preemptions",
               "Prefix cache hits")
TIMED_HERE = Card("Timed", "at this client", help="A remote server's requests are timed here: sent, each "
                  "streamed chunk, finished. Its batches and KV blocks are not visible from outside")


def lane_cards(r: dict, other_name: str | None, other: dict | None, keys: tuple[str, ...] = (),
               remote: bool = False, in_flight: int = 0) -> list[Card]:
    """The scenario's metrics (keys) first, marked (provisional while `in_flight` requests of the shown
    lanes run), then the usual ones not already shown."""
    lead = [c for key in keys for c in _lead_cards(METRICS[key], r, other_name, other, in_flight)]
    cards = lead + [c for c in _all_cards(r, other_name, other) if c.label not in {x.label for x in lead}]
    return [c for c in cards if c.label not in ENGINE_ONLY] + [TIMED_HERE] if remote else cards


def _lead_cards(metric, r: dict, other_name: str | None, other: dict | None, in_flight: int = 0) -> list[Card]:
    """So far, with no ratio, while requests still run: 'Time for the run: static 32.63 s' once became 97.83 s."""
    vs = versus(r, other_name, other, metric.key, metric.higher_is_better) if metric.per is None else {}
    if in_flight:
        vs = {"delta": f"so far: {in_flight} in flight", "tone": "off"}
    return [Card(metric.label if part is None else f"{metric.label} · {part}", metric.text(v), **vs,
                 help=f"What this scenario is about. {metric.help}", lead=True) for part, v in values(metric, r)]


def _all_cards(r: dict, other_name: str | None, other: dict | None) -> list[Card]:
    def vs(key, higher_is_better=False):
        return versus(r, other_name, other, key, higher_is_better)

    paused = " Paused time is left out."
    return _slo_cards(r, vs) + _spec_cards(r) + [
        Card("Throughput", fmt(r["output_tokens_per_s"], " tok/s"), **vs("output_tokens_per_s", True),
             help="Output tokens per second of finished requests, since the run's first arrival." + paused),
        Card("Requests done", f"{r['completed']}", f"{r['in_flight']} in flight"),
        Card("TTFT p50", fmt(r["ttft_p50_s"], " s", digits=2), **vs("ttft_p50_s"),
             help="Time to first token, queueing included." + paused),
        Card("TTFT p99", fmt(r["ttft_p99_s"], " s", digits=2), **vs("ttft_p99_s"), help=paused.strip()),
        Card("TPOT p50", fmt(r["tpot_p50_s"], " ms", 1000, 0), help="Time per output token after the first." + paused),
        Card("TPOT p99", fmt(r["tpot_p99_s"], " ms", 1000, 0), **vs("tpot_p99_s"), help=paused.strip()),
        Card("Longest token wait", fmt(r["max_token_wait_s"], " s", digits=2), **vs("max_token_wait_s"),
             help="The longest a request waited between two of its tokens: an iteration's length, or more "
                  "where it waited between iterations (preempted; a disaggregated lane's decode engine "
                  "waiting for its turn)"),
        Card("Padding waste", fmt(r["padding_waste_pct"], " %"),
             help="Computed token slots that were padding, or rows that had already finished"),
        Card("KV waste", fmt(r["kv_waste_pct"], " %"),
             help="Allocated KV slots holding no token (static reserves prompt + max_tokens up front)"),
        Card("Mean batch", fmt(r["mean_batch_size"]), help="Rows per forward pass"),
        Card("Mean step", fmt(r["mean_step_ms"], " ms", digits=0)),
        Card("Cost", "–" if r["usd_per_million_output_tokens"] is None else
             f"${r['usd_per_million_output_tokens']:.2f}/M tok", **vs("usd_per_million_output_tokens"),
             help=f"Dollars per million output tokens at ${current_price():.2f} per device hour. "
                  "Live lanes share the device, so each lane's figure is higher than it would be alone; "
                  "the ratio between lanes is what compares them"),
    ]


def _slo_cards(r: dict, vs) -> list[Card]:
    """Goodput under the lane's latency SLOs, when it has any."""
    if r.get("slo_ttft_s") is None and r.get("slo_tpot_s") is None:
        return []
    slos = " and ".join(s for s in (r["slo_ttft_s"] is not None and f"TTFT ≤ {r['slo_ttft_s']:g} s",
                                    r["slo_tpot_s"] is not None and f"TPOT ≤ {1000 * r['slo_tpot_s']:g} ms") if s)
    return [Card("SLO met", fmt(r["slo_attainment_pct"], " %", digits=0), **vs("slo_attainment_pct", True),
                 help=f"Requests that met {slos}, of all this run's requests"),
            Card("Goodput", fmt(r["goodput_requests_per_s"], " req/s", digits=2),
                 **vs("goodput_requests_per_s", True),
                 help=f"Requests per second that met {slos} (DistServe's goodput)")]


def _spec_cards(r: dict) -> list[Card]:
    """Speculative decoding's own numbers, on a lane that drafted."""
    if not r.get("draft_tokens"):
        return []
    return [Card("Drafts accepted", fmt(r["acceptance_rate"], " %", 100, 0), f"{r['accepted_tokens']:,} of "
                 f"{r['draft_tokens']:,}", help="Draft tokens the model's own choices confirmed / draft tokens"),
            Card("Tokens per row-step", fmt(r["tokens_per_decode_row"], digits=2),
                 help="Tokens a decoding row gains per step: 1 without speculation, 1 + accepted drafts with it")]
