"""KV cache page: one request's logical blocks -> block table -> physical blocks, live,
and the fragmentation story (paged vs reserved) in numbers."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.service import get_service
from ui.live_view import live_view
from ui.hub_reader import session_reader
from ui.kv_stats import KVStats
from ui.roofline_panel import roofline_section

svc = get_service()
st.title("KV cache: paged blocks vs up-front reservation")
st.markdown(
    "A request's tokens fill **logical blocks** in order. Its **block table** maps each one to a "
    "**physical block** anywhere in the pool, so memory is taken as the request grows and returned the "
    "moment it finishes. Pick a request in the playground (or here) to follow it.")

lanes = svc.lane_names
lane = st.segmented_control("Lane", lanes, default=lanes[0], key="kv_lane") or lanes[0]
live_view(key="kv_detail", lanes=[lane], running=lanes, mode="kv_detail",
          selected=st.session_state.get("kv_selected"))


@st.fragment(run_every=1.0)
def fragmentation() -> None:
    rows = session_reader("kv_stats", KVStats, svc.hub).table()
    if not rows:
        st.info("Numbers appear once an engine holds KV blocks.")
        return
    st.subheader("Where the KV memory goes, right now")
    st.dataframe(pd.DataFrame(rows).set_index("lane"), width="stretch")
    st.caption(
        "Allocated: slots in the blocks requests hold now. Holding tokens: slots with a token in them. "
        "Unused: allocated minus holding. 'Contiguous reservation' is what the same requests would take "
        "if each reserved prompt + max_tokens up front, as static batching does.")


fragmentation()
st.fragment(run_every=2.0)(roofline_section)(svc)
