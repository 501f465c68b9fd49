"""The roofline on the KV cache page: the loaded model's numbers, the device's measured peaks, and where
recent iterations sit under the roof (from the `roofline` field of each step event)."""
from __future__ import annotations

from collections import deque

import plotly.graph_objects as go
import streamlit as st

from .hub_reader import session_reader

KEEP_STEPS = 300  # per lane


class RooflineWindow:
    """The latest steps' roofline numbers per lane, read from the hub."""

    def __init__(self):
        self.cursor = 0
        self.steps: dict[str, deque] = {}

    def consume(self, hub) -> None:
        batch = hub.read(self.cursor, limit=20000)
        self.cursor = batch.cursor
        for _, item in batch.events:
            if item["type"] == "step" and item.get("roofline"):
                self.steps.setdefault(item["lane"], deque(maxlen=KEEP_STEPS)).append(item["roofline"])

    def table(self) -> list[dict]:
        return [_row(lane, list(d)) for lane, d in self.steps.items() if d]


def _row(lane: str, steps: list[dict]) -> dict:
    def mean(key):
        vals = [s[key] for s in steps if key in s]
        return sum(vals) / len(vals) if vals else None

    def shown(key, scale=1.0):  # '–' where the steps carry no such number (the device's peaks unmeasured)
        m = mean(key)
        return "–" if m is None else f"{m * scale:,.1f}"

    return {"lane": lane, "iterations": len(steps), "memory bandwidth used %": shown("mem_util", 100),
            "compute used %": shown("compute_util", 100), "FLOPs per byte": shown("intensity"),
            "GB/s": shown("bytes_per_s", 1e-9), "GFLOP/s": shown("flops_per_s", 1e-9)}


def model_lines(summary: dict) -> str:
    """The model's and the device's numbers, as markdown (numbers only: no user text)."""
    lines = [f"- Matmul weights read once per iteration: **{summary['weight_bytes'] / 1e6:.0f} MB**; "
             f"KV cache: **{summary['kv_bytes_per_token'] / 1024:.1f} KiB per token**."]
    p = summary.get("peaks")
    if p is None:
        return "\n".join(lines + ["- The device's peaks could not be measured: no utilization."])
    bound = ", ".join(f"{'never' if b is None else f'{b:.0f} rows'} at {c} tokens of context"
                      for c, b in summary["decode_compute_bound_batch"].items())
    lines += [f"- Device ({p['device']}): **{p['bytes_per_s'] / 1e9:.1f} GB/s** and "
              f"**{p['flops_per_s'] / 1e9:.1f} GFLOP/s** measured; the ridge is "
              f"**{summary['ridge_flops_per_byte']:.1f} FLOPs per byte**.",
              f"- A decode step turns compute-bound from a batch of {bound}.",
              f"- Measured by a {p['method']}."]
    return "\n".join(lines)


def roofline_chart(window: RooflineWindow, peaks: dict) -> go.Figure:
    """Recent steps (FLOPs per byte, achieved FLOP/s) under the device's roof, one colour per lane."""
    ridge = peaks["flops_per_s"] / peaks["bytes_per_s"]
    xs = [ridge / 100, ridge, ridge * 100]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=[min(x * peaks["bytes_per_s"], peaks["flops_per_s"]) / 1e9 for x in xs],
                    mode="lines", name="roof", line={"color": "#9aa4b5", "dash": "dash"})
    for lane, steps in window.steps.items():
        fig.add_scatter(x=[s["intensity"] for s in steps], y=[s["flops_per_s"] / 1e9 for s in steps],
                        mode="markers", name=lane, marker={"size": 5, "opacity": 0.6})
    fig.update_layout(template="plotly_dark", height=380, margin={"t": 30, "b": 70, "l": 80},
                      xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOPs per byte moved)"}},
                      yaxis={"type": "log", "title": {"text": "achieved GFLOP/s"}})
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
    window = session_reader("roofline_window", RooflineWindow, svc.hub)
    rows = window.table()
    if not rows:
        st.info("Per-iteration numbers appear with the first iteration.")
        return
    st.dataframe(rows, width="stretch", hide_index=True)
    if summary.get("peaks"):
        st.plotly_chart(roofline_chart(window, summary["peaks"]), width="stretch")
