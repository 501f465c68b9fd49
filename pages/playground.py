"""Live playground: type prompts or generate load, watch the engines batch them."""
from __future__ import annotations

import streamlit as st

from engine.cost import usd_per_million_tokens
from engine.recording import play_while_loading
from engine.remote_config import RemoteConfig
from engine.service import get_service
from ui import controls, replay_panel, sidebar
from ui.cards import Card, cards_html
from ui.live_view import live_view
from ui.metrics import LiveMetrics, ratio
from ui.narration_panel import narration
from ui.presentation import presentation_toggle
from ui.primer import primer
from ui.price import current as current_price
from ui.price import price_input
from ui.role import VIEWER_NOTE, current_client
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
if client.presenter:
    if sidebar.playback(svc):
        st.session_state.clear_after_s = svc.clock()
        st.session_state.metrics = None
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
                   large_text=presenting, clear_after_s=clear_after_s, fit_first_screen=presenting)
st.session_state.kv_selected = picked.selected  # the KV cache page follows the same request
if not presenting:
    narration(svc)


# ---- metric cards (from the same events, in Python) ----------------------------------------------
def fmt(v, unit="", scale=1.0, digits=1):
    return "–" if v is None else f"{v * scale:.{digits}f}{unit}"


@st.fragment(run_every=1.0)
def metric_cards() -> None:
    m = st.session_state.get("metrics")
    if m is None:
        m = st.session_state.metrics = LiveMetrics()
        m.since_s = st.session_state.get("clear_after_s") or 0.0
    m.consume(svc.hub)
    summary = m.summary()
    shown = [s for s in opts["lanes"] if s in summary] or list(summary)
    if not shown:
        st.info("Metrics appear as soon as the first request finishes.")
        return
    other = {shown[0]: shown[1], shown[1]: shown[0]} if len(shown) == 2 else {}  # each lane vs the other
    price = current_price()
    for r in summary.values():
        r["usd_per_million_output_tokens"] = usd_per_million_tokens(r["output_tokens_per_s"], price)
    st.markdown(cards_html([(s, lane_cards(summary[s], other.get(s), summary.get(other.get(s)),
                                           isinstance(svc.lanes.get(s), RemoteConfig))) for s in shown]),
                unsafe_allow_html=True)
    if m.skipped:
        st.caption(f"{m.skipped} events left the ring buffer before this tab read them.")


def versus(r: dict, other_name: str | None, other: dict | None, key: str, higher_is_better: bool) -> dict:
    """The card's ratio against the other lane ("1.80x vs static") and whether that is good."""
    vs = ratio(r[key], other and other[key])
    if vs is None:
        return {}
    good = vs >= 1 if higher_is_better else vs <= 1
    return {"delta": f"{vs:.2f}x vs {other_name}", "tone": "up" if good else "down"}


# what a remote server's requests, timed at this client, cannot tell
ENGINE_ONLY = ("Longest token wait", "Padding waste", "KV waste", "Mean batch", "Mean step")
TIMED_HERE = Card("Timed", "at this client", help="A remote server's requests are timed here: sent, each "
                  "streamed chunk, finished. Its batches and KV blocks are not visible from outside")


def lane_cards(r: dict, other_name: str | None, other: dict | None, remote: bool = False) -> list[Card]:
    cards = _all_cards(r, other_name, other)
    return [c for c in cards if c.label not in ENGINE_ONLY] + [TIMED_HERE] if remote else cards


def _all_cards(r: dict, other_name: str | None, other: dict | None) -> list[Card]:
    def vs(key, higher_is_better=False):
        return versus(r, other_name, other, key, higher_is_better)

    return [
        Card("Throughput", fmt(r["output_tokens_per_s"], " tok/s"), **vs("output_tokens_per_s", True),
             help="Output tokens per second of finished requests, since the first arrival"),
        Card("Requests done", f"{r['completed']}", f"{r['in_flight']} in flight"),
        Card("TTFT p50", fmt(r["ttft_p50_s"], " s", digits=2), **vs("ttft_p50_s"),
             help="Time to first token, queueing included"),
        Card("TTFT p99", fmt(r["ttft_p99_s"], " s", digits=2), **vs("ttft_p99_s")),
        Card("TPOT p50", fmt(r["tpot_p50_s"], " ms", 1000, 0), help="Time per output token after the first"),
        Card("TPOT p99", fmt(r["tpot_p99_s"], " ms", 1000, 0), **vs("tpot_p99_s")),
        Card("Longest token wait", fmt(r["max_decode_step_s"], " s", digits=2), **vs("max_decode_step_s"),
             help="The longest iteration that carried decode rows: the longest a decoding request waited "
                  "for its next token"),
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


price_input(st.columns([1, 4])[0])
metric_cards()
