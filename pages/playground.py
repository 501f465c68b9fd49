"""Live playground: type prompts or generate load, watch the engines batch them."""
from __future__ import annotations

import streamlit as st

from engine.workshop.recording import play_while_loading
from engine.serving.registry import get_service
from ui import controls, replay_panel, sidebar
from ui.live_view import live_view
from ui.metric_cards import metric_cards
from ui.narration_panel import narration
from ui.presentation import presentation_toggle
from ui.primer import primer
from ui.price import price_input
from ui.role import VIEWER_NOTE, current_client
from ui.run_metrics import clear_views
from ui.room_panel import room_join_panel
from ui.shortcuts import keyboard_shortcuts
from ui.status import loading_banner
from ui.trace_download import trace_download

svc = get_service()
client = current_client(svc)
play_while_loading(svc)  # a fresh machine: the shipped recording plays until the engines are ready
if client.presenter and svc.access.room:
    room_join_panel(svc)  # first in the sidebar: the room scans it from the projector
opts = sidebar.view_options(svc, client.presenter)
shown = sidebar.controls(svc)  # one snapshot for the sidebar and the live view (which reruns on a change)
if client.presenter:
    if sidebar.playback(svc, shown):
        clear_views(svc)
    sidebar.engine_settings(svc)
    trace_download(svc)
    replay_panel.recorder(svc)
    replay_panel.replay_controls(svc)
    keyboard_shortcuts()
else:
    st.sidebar.info(VIEWER_NOTE, icon=":material/visibility:")

presenting = st.session_state.get("large_text", False)  # presentation mode: for a projector
if presenting:  # the views first: one line of controls, the narration's latest, then the views
    controls.compact_inputs(svc, client, opts["compare"], presentation_toggle)
    loading_banner(svc)
    narration(svc, large=True, compact=True)
else:
    c_title, c_mode = st.columns([5, 1], vertical_alignment="center")
    c_title.title("Inflight — watch an LLM engine batch requests")
    with c_mode:
        presentation_toggle()
    st.caption(sidebar.config_summary(svc))
    primer()
    loading_banner(svc)
    controls.inputs(svc, client, opts["compare"])


# ---- live views (client-side, fed by /engine/ws) ---------------------------------------------------
replay = svc.replay
lanes, headers, clear_after_s = opts["lanes"], opts["headers"], st.session_state.get("clear_after_s")
if replay is not None:  # the views show a recording: its lanes, all of it
    replay_panel.banner(replay)
    (lanes, headers), clear_after_s = replay_panel.view_lanes(replay), None
picked = live_view(key="live", lanes=lanes, headers=headers, running=lanes if replay else None, axis=opts["axis"],
                   large_text=presenting, clear_after_s=clear_after_s, fit_first_screen=presenting,
                   controls=shown if client.presenter and not replay else None)
st.session_state.kv_selected = picked.selected  # the KV cache page follows the same request
if not presenting:
    narration(svc)


# ---- metric cards (from the same events, in Python) ----------------------------------------------
price_input(st.columns([1, 4])[0])
metric_cards(svc, opts["lanes"])
