"""The roofline on the KV cache page: the loaded model's numbers, the device's measured peaks, and where
recent iterations sit under the roof (from the `roofline` field of each step event)."""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from engine.telemetry.roofline_window import RooflineWindow, model_lines

from .hub_reader import shared_reader


# the live view's lane colours, by lane order (assets/live/roofline_view.js: the palette's first four)
LANE_COLORS = ("#38BDF8", "#FB923C", "#A3E635", "#F472B6")
# one label a decade ("1", "10", "100", ...): plotly's default also labels 2 and 5 ("2 / 1000 / 5")
LOG_AXIS = {"type": "log", "dtick": 1, "tickformat": "~s"}


def roofline_chart(steps: dict[str, list[dict]], peaks: dict, lanes: list[str]) -> go.Figure:
    """Recent steps (lane -> RooflineWindow's steps: FLOPs per byte, achieved FLOP/s) under the device's roof,
    each lane in its colour on the playground (`lanes`: the service's lane order)."""
    ridge = peaks["flops_per_s"] / peaks["bytes_per_s"]
    xs = [ridge / 100, ridge, ridge * 100]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=[min(x * peaks["bytes_per_s"], peaks["flops_per_s"]) / 1e9 for x in xs],
                    mode="lines", name="roof", line={"color": "#9aa4b5", "dash": "dash"})
    for lane, points in steps.items():
        color = LANE_COLORS[lanes.index(lane) % len(LANE_COLORS)] if lane in lanes else "#9aa4b5"
        fig.add_scatter(x=[s["intensity"] for s in points], y=[s["flops_per_s"] / 1e9 for s in points],
                        mode="markers", name=lane, marker={"size": 5, "opacity": 0.6, "color": color})
    fig.update_layout(template="plotly_dark", height=380, margin={"t": 30, "b": 70, "l": 80},
                      xaxis={**LOG_AXIS, "title": {"text": "arithmetic intensity (FLOPs per byte moved)"}},
                      yaxis={**LOG_AXIS, "title": {"text": "achieved GFLOP/s"}})
    return fig


def roofline_section(svc) -> None:
    st.subheader("Roofline: why a bigger batch is nearly free, until it is not")
    st.markdown("Every iteration reads all the weights once, whatever the batch size, and each row's KV "
                "cache. More rows add FLOPs but few bytes, so a decode step stays memory-bound until the "
                "batch passes the ridge. Counted from the model's config and each iteration's batch: ideal "
                "traffic (activations left out), over the iteration's measured time.")
    lane = next((n for n, w in svc.workers.items() if w.roofline is not None), None)
    if lane is None:
        st.info("The roofline appears once an engine has loaded.")
        return
    summary = svc.workers[lane].roofline.summary()
    st.markdown(model_lines(summary))
    with shared_reader("roofline_window", RooflineWindow, svc.hub) as window:  # (copies out)
        rows, steps = window.table(), {lane: list(d) for lane, d in window.steps.items()}
    if not rows:
        st.info("Per-iteration numbers appear with the first iteration.")
        return
    st.dataframe(rows, width="stretch", hide_index=True)
    if summary.get("peaks"):
        st.plotly_chart(roofline_chart(steps, summary["peaks"], svc.lane_names), width="stretch")
