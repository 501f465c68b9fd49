"""The current run's metrics (engine/telemetry/live_metrics.py), shared by the metric cards and "What to watch",
and the narration: one of each for every session that shows the same run (pages/ui/hub_reader.py); Clear
views starts this session's own run and narration from now."""
from __future__ import annotations

import streamlit as st

from engine.telemetry.live_metrics import LiveMetrics
from engine.workshop.narration import Narrator
from engine.workshop.scenarios.headline import METRICS, values
from engine.serving.service import lane_dict

from .hub_reader import shared_reader

SUMMARY_AGE_S = 0.5


def run_metrics(svc):
    """The run's LiveMetrics, caught up and held for a `with` block (read it there only)."""
    since = st.session_state.get("clear_after_s")
    return shared_reader("metrics", lambda: LiveMetrics(since or 0.0, cleared=since is not None), svc.hub, since)


def lane_slos(svc) -> dict[str, tuple]:
    """Each lane's latency SLOs (TTFT, TPOT seconds; None: none): a lane's own, a remote lane the room's."""
    return {name: (getattr(c, "slo_ttft_s", None), getattr(c, "slo_tpot_s", None)) if not c.is_remote
            else (svc.cfg.slo_ttft_s, svc.cfg.slo_tpot_s) for name, c in svc.lanes.items()}


def run_summary(svc, m: LiveMetrics) -> dict[str, dict]:
    """The run's metrics per lane, goodput under each lane's SLOs (at most SUMMARY_AGE_S old: however many
    tabs show it, it is computed at most twice a second)."""
    return m.summary(lane_slos(svc), SUMMARY_AGE_S)


def narrator(svc):
    """The narrator, caught up with the hub and held for a `with` block (it knows the lanes' settings even when
    their `lanes` event has left the hub); after Clear views, one that reads from the hub's head then."""
    since = st.session_state.get("clear_after_s")
    cursor = 0 if since is None else svc.hub.head
    return shared_reader("narrator", lambda: Narrator(lanes=_lanes(svc), cursor=cursor), svc.hub, since)


def clear_views(svc) -> None:
    """The views, the cards and the narration start afresh from now (the engines keep running)."""
    st.session_state.clear_after_s = svc.clock()
    with run_metrics(svc), narrator(svc):  # made now: the narration reads from this moment's head
        pass


def _lanes(svc) -> dict[str, dict]:
    return {name: lane_dict(cfg) for name, cfg in svc.lanes.items()}


def run_label(m: LiveMetrics, now: float) -> str:
    """Which requests the cards describe, and that pauses are left out."""
    if m.run_title is not None:
        what = f"This run: {m.run_title}, started {_ago(now - m.since_s)} ago"
    elif m.cleared:
        what = f"Since Clear views, {_ago(now - m.since_s)} ago"
    else:
        what = "Every request so far (run a scenario or press Clear views to start afresh)"
    paused = m.paused_s(now)
    if paused >= 0.05:
        what += f" · {paused:.1f} s paused, left out of every latency and of throughput"
    return what


def headline_line(svc, m: LiveMetrics, keys: tuple[str, ...], lanes: list[str]) -> str | None:
    """"TTFT p50: continuous 0.42 s · dynamic 1.31 s" for the scenario's first metric, this run; "so far"
    while a lane still has requests in flight (the figures will change)."""
    summary = run_summary(svc, m)
    if not keys or not any(lane in summary for lane in lanes):
        return None
    metric = METRICS[keys[0]]
    parts = [f"{lane} {_values_text(metric, summary[lane])}" for lane in lanes if lane in summary]
    so_far = " (so far)" if any(summary[lane]["in_flight"] for lane in lanes if lane in summary) else ""
    return f"{metric.title}{so_far}: " + " · ".join(parts)


def _values_text(metric, lane_summary: dict) -> str:
    return ", ".join(metric.text(v) if part is None else f"{part} {metric.text(v)}"
                     for part, v in values(metric, lane_summary))


def _ago(s: float) -> str:
    s = max(0.0, s)
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"
