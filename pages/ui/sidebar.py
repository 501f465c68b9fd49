"""The playground's sidebar: view options, engine settings, playback. Commands go to the service."""
from __future__ import annotations

import dataclasses

import streamlit as st

from engine.config import DEFAULT_MODEL
from engine.service import strategy_lanes

VIEWS = {"Continuous": ["continuous"], "Static": ["static"], "Dynamic": ["dynamic"]}
BASELINES = ("static", "dynamic")
MODEL_PRESETS = {
    f"{DEFAULT_MODEL} (default)": DEFAULT_MODEL,
    "HuggingFaceTB/SmolLM2-360M-Instruct": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct (GPU)": "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct (GPU)": "Qwen/Qwen2.5-1.5B-Instruct",
    "Local directory…": None,
}


def strategies_for(view: str, baseline: str) -> list[str]:
    return ["continuous", baseline] if view == "Side by side" else VIEWS[view]


def current_view(strategies: list[str]) -> tuple[str, str]:
    """The toggle position that shows what the service runs now (a new tab adopts it)."""
    if len(strategies) == 2 and strategies[0] == "continuous" and strategies[1] in BASELINES:
        return "Side by side", strategies[1]
    for name, s in VIEWS.items():
        if strategies == s:
            return name, "static"
    return "Side by side", "static"


def _apply_view(svc) -> None:
    try:
        svc.set_lanes(strategy_lanes(svc.cfg, strategies_for(st.session_state.view, st.session_state.baseline)))
    except ValueError as e:
        st.session_state.view_error = str(e)


def view_options(svc, presenter: bool) -> dict:
    """Strategy toggle and display options. Only a change of the toggle reconfigures the service,
    so several open tabs never fight over it; a viewer sees the toggle but cannot move it."""
    view, baseline = current_view(svc.strategies)
    if not presenter:  # follow what the presenter runs
        st.session_state.view, st.session_state.baseline = view, baseline
    st.session_state.setdefault("view", view)
    st.session_state.setdefault("baseline", baseline)
    st.sidebar.header("View")
    options = [*VIEWS, "Side by side"]
    locked = None if presenter else "The presenter chooses the engines"
    st.sidebar.radio("Strategy", options, key="view", on_change=_apply_view, args=(svc,),
                     disabled=not presenter, help=locked)
    st.sidebar.radio("Baseline beside continuous", BASELINES, horizontal=True, key="baseline",
                     on_change=_apply_view, args=(svc,),
                     disabled=not presenter or st.session_state.view != "Side by side")
    axis = st.sidebar.radio("Time axis", ["seconds", "iterations"], horizontal=True, key="axis")
    large = st.sidebar.toggle("Presentation mode (large text)", key="large_text")
    return {"strategies": svc.strategies, "axis": "time" if axis == "seconds" else "iterations",
            "large_text": large}


def playback(svc) -> bool:
    """Pause / single step / resume, slow motion and clear. Returns True when 'clear' was pressed."""
    st.sidebar.header("Playback")
    paused = svc.paused.is_set()
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
    slow = st.sidebar.slider("Slow motion: min. seconds per iteration", 0.0, 2.0, svc.min_interval_s, 0.05,
                             key="slow_motion")
    if slow != svc.min_interval_s:
        svc.set_slow_motion(slow)
    return st.sidebar.button("Clear views", icon=":material/mop:", width="stretch",
                             help="Forget what the views show so far (the engines keep running)")


def engine_settings(svc) -> None:
    """Engine knobs; Apply drains in-flight requests, then restarts the engines with them."""
    cfg = svc.cfg
    with st.sidebar.expander("Engine settings", expanded=False), st.form("engine_settings", border=False):
        names = list(MODEL_PRESETS)
        current = next((n for n, m in MODEL_PRESETS.items() if m == cfg.model), names[-1])
        choice = st.selectbox("Model", names, index=names.index(current))
        local = st.text_input("Local model directory", value="" if MODEL_PRESETS.get(current) else cfg.model,
                              disabled=False, help="A folder saved with save_pretrained")
        block_size = st.select_slider("KV block size (tokens)", [1, 2, 4, 8, 16, 32, 64, 128, 256],
                                      value=cfg.block_size if cfg.block_size in (1, 2, 4, 8, 16, 32, 64, 128, 256) else 16)
        blocks = st.number_input("KV pool size (blocks, 0 = from memory budget)", 0, 1_000_000,
                                 cfg.num_kv_blocks or 0, step=16)
        max_seqs = st.slider("Max batch (sequences)", 1, 256, cfg.max_num_seqs)
        budget = st.select_slider("Token budget per iteration", [16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
                                  value=cfg.max_num_batched_tokens
                                  if cfg.max_num_batched_tokens in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) else 512)
        chunked = st.toggle("Chunked prefill", cfg.enable_chunked_prefill)
        static_bs = st.slider("Static batch size", 1, 64, cfg.static_batch_size)
        wait = st.slider("Dynamic: max wait (s)", 0.0, 5.0, float(cfg.static_max_wait_s), 0.1)
        if st.form_submit_button("Apply", type="primary", width="stretch"):
            model = MODEL_PRESETS[choice] or local.strip() or cfg.model
            changes = dict(model=model, block_size=block_size, num_kv_blocks=blocks or None, max_num_seqs=max_seqs,
                           max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                           static_batch_size=static_bs, static_max_wait_s=wait)
            changes = {k: v for k, v in changes.items() if getattr(cfg, k) != v}
            if changes:
                try:
                    svc.configure(**changes)
                    st.toast("Applying: engines finish their in-flight requests, then restart.")
                except ValueError as e:
                    st.error(str(e))


def config_summary(cfg) -> str:
    d = dataclasses.asdict(cfg)
    return (f"{d['model']} · block {d['block_size']} · max batch {d['max_num_seqs']} · "
            f"budget {d['max_num_batched_tokens']} tok · static batch {d['static_batch_size']}")
