"""Benchmark: the same workload through every strategy, measured side by side (engine.bench)."""
from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from engine.bench import job as bench_job
from engine.bench.config import ALL_STRATEGIES, BenchConfig
from engine.bench.report import write_csv
from engine.bench.workloads import PRESETS
from engine.serving.registry import get_service
from ui import price
from ui.polled import polled
from ui.role import VIEWER_NOTE, is_presenter

svc = get_service()
st.title("Benchmark: continuous vs static vs Hugging Face")
if not is_presenter(svc):
    st.info(VIEWER_NOTE, icon=":material/visibility:")
    st.stop()  # a run pauses the live engines for everyone
st.markdown(
    "Runs a workload through each strategy in turn, on the same model, device, dtype and KV memory, "
    "warm-up excluded: the numbers `python -m engine.bench` prints. The live engines pause while it runs "
    "(they would compete for the same cores).")

job = bench_job.current()
running = job is not None and job.is_alive()

with st.form("bench"):
    c1, c2, c3 = st.columns(3)
    workload = c1.selectbox("Workload", list(PRESETS), index=list(PRESETS).index("quick"))
    scale = c1.slider("Scale (request count x)", 0.1, 4.0, 0.5, 0.1)
    strategies = c2.multiselect("Strategies", ALL_STRATEGIES, default=["continuous", "static", "hf-generate"])
    rates_text = c2.text_input("Arrival rates (requests/s, comma separated; empty = all at t=0)", "")
    slo_ttft = c3.number_input("SLO: TTFT (s)", 0.0, 600.0, 5.0, 0.5)
    slo_tpot = c3.number_input("SLO: TPOT (s)", 0.0, 10.0, 0.2, 0.05)
    price_per_hour = c3.number_input(price.LABEL, 0.0, 10_000.0, price.current(), 0.1, format="%.2f",
                                     help=price.HELP)
    submitted = st.form_submit_button("Run benchmark", type="primary", disabled=running)

if submitted:
    try:
        rates = [float(r) for r in rates_text.split(",") if r.strip()] or None
        if not strategies:
            raise ValueError("pick at least one strategy")
        # The live engines' configuration (a copy: the service may be reconfigured meanwhile).
        price.remember(price_per_hour)
        cfg = BenchConfig(engine=dataclasses.replace(svc.cfg), slo_ttft_s=slo_ttft or None,
                          slo_tpot_s=slo_tpot or None, price_per_hour=price_per_hour)
        job = bench_job.start(bench_job.BenchJob(workload, scale, strategies, rates, cfg, service=svc))
        running = True
    except (ValueError, RuntimeError) as e:
        st.error(str(e))


@polled(1.0)
def progress_panel() -> None:
    j = bench_job.current()
    if j is None:
        st.caption("No benchmark is running.")  # (a line, not an empty fragment's gap)
        return
    if j.is_alive():
        p = j.progress
        label = f"{p.strategy}: {p.stage} {p.done}/{p.total}" if p else "starting…"
        st.progress(j.fraction, text=label)
        if st.button("Cancel"):
            j.cancel.set()
    elif j.error:
        st.error(f"Benchmark stopped: {j.error}")
    elif st.session_state.get("bench_shown") is not j:
        st.session_state.bench_shown = j
        st.rerun()  # the run just ended: draw the results (a full rerun leaves the fragment)


progress_panel()

if job is not None and job.result is not None and not job.is_alive():
    res = job.result
    table = pd.DataFrame(res["results"])
    cols = [c for c in ("lane", "strategy", "rate", "output_tokens_per_s", "requests_per_s", "ttft_p50_s",
                        "ttft_p99_s", "tpot_p50_s", "e2e_p50_s", "padding_waste_pct", "kv_waste_pct",
                        "mean_batch_size", "goodput_requests_per_s", "telemetry_pct", "usd_per_million_output_tokens")
            if c in table]
    cols += [c for c in table if c.startswith("vs_") and c.endswith("_output_tokens_per_s")]
    st.subheader("Results")
    st.dataframe(table[cols].round(3), width="stretch", hide_index=True)

    runs = res.get("runs", [])
    if res["config"].get("rates"):
        fig = go.Figure()
        for s, g in table.groupby("lane"):
            fig.add_scatter(x=g["rate"], y=g["output_tokens_per_s"], mode="lines+markers", name=s)
        fig.update_layout(title="Throughput vs arrival rate", xaxis_title="arrival rate (requests/s)",
                          yaxis_title="output tokens/s", template="plotly_dark")
        st.plotly_chart(fig, width="stretch")

    c1, c2 = st.columns(2)
    fig = go.Figure()
    for r in runs:
        lat = sorted(q["first_token_s"] - q["arrival_s"] for q in r["requests"] if q["first_token_s"] is not None)
        if lat:
            fig.add_scatter(x=lat, y=[(i + 1) / len(lat) for i in range(len(lat))], mode="lines",
                            name=f"{r['lane']}" + (f" @ {r['rate']}/s" if r.get("rate") else ""))
    fig.update_layout(title="TTFT, cumulative distribution", xaxis_title="seconds", yaxis_title="share of requests",
                      template="plotly_dark")
    c1.plotly_chart(fig, width="stretch")
    fig = go.Figure()
    for r in runs:
        if r["steps"]:
            fig.add_scatter(x=[s["t_start"] for s in r["steps"]], y=[s["rows"] for s in r["steps"]], mode="lines",
                            name=r["lane"], line_shape="hv")
    fig.update_layout(title="Batch size over time", xaxis_title="seconds since the workload started",
                      yaxis_title="rows in the forward pass", template="plotly_dark")
    c2.plotly_chart(fig, width="stretch")

    d1, d2 = st.columns(2)
    d1.download_button("Download JSON", json.dumps({"config": res["config"], "results": res["results"]}, indent=2,
                                                   default=str), "inflight-bench.json", "application/json")
    with tempfile.TemporaryDirectory() as tmp:
        write_csv(res["results"], Path(tmp) / "bench.csv")
        d2.download_button("Download CSV", (Path(tmp) / "bench.csv").read_text(), "inflight-bench.csv", "text/csv")
