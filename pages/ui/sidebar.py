"""The playground's sidebar: lanes and view options, playback, base engine settings. Commands go to the service."""
from __future__ import annotations

import streamlit as st

from engine.config import DEFAULT_MODEL, MAX_SLO_S
from engine.serving.lanes import lane_headers
from engine.serving.service import AUTO_SLOW_INTERVAL_S, AUTO_SLOW_MAX_RUNNING, SETTLE_WAIT_S

from .compare import compare_control

MODEL_PRESETS = {
    f"{DEFAULT_MODEL} (default)": DEFAULT_MODEL,
    "HuggingFaceTB/SmolLM2-360M-Instruct": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct (GPU)": "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct (GPU)": "Qwen/Qwen2.5-1.5B-Instruct",
    "Local directory…": None,
}


def view_options(svc, presenter: bool) -> dict:
    """The Compare control (which lanes run) and display options."""
    compare = compare_control(svc, presenter)
    lanes = svc.lanes
    st.sidebar.header("View")
    axis = st.sidebar.radio("Time axis", ["seconds", "iterations"], horizontal=True, key="axis")
    return {"compare": compare, "lanes": list(lanes), "headers": lane_headers(lanes),
            "axis": "time" if axis == "seconds" else "iterations"}


def controls(svc) -> dict:
    """The presenter's controls as this page draws them (the live view reruns the page when they change)."""
    return {"paused": svc.paused.is_set(), "slow_motion_s": svc.min_interval_s, "auto_slow_motion": svc.auto_slow_motion}


def playback(svc, shown: dict) -> bool:
    """Pause / single step / resume, slow motion and clear, as `shown` (controls(svc), taken once per run
    of the page: the live view compares the service with it). Returns True when 'clear' was pressed."""
    st.sidebar.header("Playback")
    paused = shown["paused"]
    c1, c2 = st.sidebar.columns(2)
    if paused:
        if c1.button("Resume", icon=":material/play_arrow:", width="stretch", type="primary"):
            svc.resume()
            st.rerun()
    elif c1.button("Pause", icon=":material/pause:", width="stretch"):
        svc.pause()
        st.rerun()
    if c2.button("Step", icon=":material/skip_next:", width="stretch", disabled=not paused,
                 help="One iteration on every engine (while paused)"):
        svc.step_once()
    st.session_state.slow_motion = min(2.0, shown["slow_motion_s"])  # follow a change made elsewhere
    st.sidebar.slider("Slow motion: min. seconds per iteration", 0.0, 2.0, step=0.05, key="slow_motion",
                      on_change=lambda: svc.set_slow_motion(st.session_state.slow_motion))
    st.session_state.auto_slow = shown["auto_slow_motion"]
    st.sidebar.toggle("Auto slow motion while few requests run", key="auto_slow",
                      on_change=lambda: svc.set_auto_slow_motion(st.session_state.auto_slow),
                      help=f"While at most {AUTO_SLOW_MAX_RUNNING} requests run on a lane, each of its iterations "
                           f"lasts at least {AUTO_SLOW_INTERVAL_S} s; a crowd runs at full speed")
    return st.sidebar.button("Clear views", icon=":material/mop:", width="stretch",
                             help="Forget what the views show so far (the engines keep running)")


def engine_settings(svc) -> None:
    """What every lane shares (the model, the KV pool, the room's latency SLOs); Apply drains in-flight requests, then restarts
    the lanes with them. Each lane's own settings are in the Compare control's lane editor."""
    cfg = svc.cfg
    with st.sidebar.expander("Engine settings (all lanes)", expanded=False), st.form("engine_settings", border=False):
        names = list(MODEL_PRESETS)
        current = next((n for n, m in MODEL_PRESETS.items() if m == cfg.model), names[-1])
        choice = st.selectbox("Model", names, index=names.index(current))
        local = st.text_input("Local model directory", value="" if MODEL_PRESETS.get(current) else cfg.model,
                              help="A folder saved with save_pretrained")
        blocks = st.number_input("KV pool size (blocks, 0 = from memory budget)", 0, 1_000_000,
                                 cfg.num_kv_blocks or 0, step=16)
        ttft = st.number_input("TTFT SLO (s, 0 = none)", 0.0, float(MAX_SLO_S), cfg.slo_ttft_s or 0.0, step=0.5,
                               help="Latency SLOs: the cards count the requests meeting both (goodput), "
                                    "/metrics too, and the slo scheduling policy serves them")
        tpot = st.number_input("TPOT SLO (ms, 0 = none)", 0, 1000 * MAX_SLO_S,
                               round(1000 * cfg.slo_tpot_s) if cfg.slo_tpot_s else 0, step=10)
        if st.form_submit_button("Apply", type="primary", width="stretch"):
            model = MODEL_PRESETS[choice] or local.strip() or cfg.model
            changes = dict(model=model, num_kv_blocks=blocks or None, slo_ttft_s=ttft or None,
                           slo_tpot_s=tpot / 1000 if tpot else None)
            changes = {k: v for k, v in changes.items() if getattr(cfg, k) != v}
            if changes:
                try:
                    with st.spinner("Restarting the engines…"):
                        settled = svc.configure(wait_s=SETTLE_WAIT_S, **changes)
                    st.toast("Applied." if settled else "Applying: engines finish their in-flight requests, then restart.")
                except ValueError as e:  # an engine that could not start: every lane is back as it was
                    st.error(str(e))


def config_summary(svc) -> str:
    """The model, the precision it runs in and why, and what the lanes compare, for the page's caption."""
    engines = [e for e in svc.status()["engines"].values() if e.get("dtype")]  # loaded, local
    precision = {(e["dtype"], e["dtype_why"]) for e in engines}
    attention = {(e["attention"], e["attention_why"], e["cuda_graphs"]) for e in engines}
    shown = " · ".join([f"{dtype} ({why})" for dtype, why in sorted(precision)]
                       + [f"{a} attention ({why}){', CUDA graphs ' + g if g != 'off' else ''}"
                          for a, why, g in sorted(attention)])
    return " · ".join(part for part in (svc.cfg.model, shown, f"lanes: {' vs '.join(svc.lanes)}") if part)
