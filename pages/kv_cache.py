"""KV cache page: one request's logical blocks -> block table -> physical blocks, live,
the fragmentation story (paged vs reserved) in numbers, and with prefix caching the blocks requests share."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.telemetry.kv_stats import KVStats
from engine.serving.registry import get_service
from ui.live_view import live_view
from ui.polled import polled
from ui.hub_reader import shared_reader
from ui.roofline_panel import roofline_section
from engine.untrusted import is_number

svc = get_service()
st.title("KV cache: paged blocks vs up-front reservation")
st.markdown(
    "A request's tokens fill **logical blocks** in order. Its **block table** maps each one to a "
    "**physical block** anywhere in the pool, so memory is taken as the request grows and returned the "
    "moment it finishes. With prefix caching on, requests that start with the same tokens point their "
    "tables at the **same physical blocks** (shared), and a finished request's full blocks stay **cached** "
    "for the next hit until the pool needs them. Pick a request in the playground (or here) to follow it.")

lanes = [n for n, c in svc.lanes.items() if not c.is_remote]  # a remote server shows no blocks
lane, selected = None, st.session_state.get("kv_selected")
if lanes:
    lane = st.segmented_control("Lane", lanes, default=lanes[0], key="kv_lane") or lanes[0]
    picked = live_view(key="kv_detail", lanes=[lane], running=svc.lane_names, mode="kv_detail", selected=selected)
    if picked is not None and picked.selected is not None:
        selected = picked.selected
else:
    st.info("Every lane is a remote server, and a remote server does not expose its KV blocks.")


@polled(1.0)
def fragmentation(lane: str, selected: int | None) -> None:
    with shared_reader("kv_stats", KVStats, svc.hub) as stats:  # (shared with the other sessions: read here)
        rows = stats.table()
        rid = stats.request_to_show(lane, selected)
        blocks = stats.block_rows(lane, rid) if rid is not None else None
    if not rows:
        st.info("Numbers appear once an engine holds KV blocks.")
        return
    st.subheader("Where the KV memory goes, right now")
    # one column per lane, one row per figure: every figure readable at any width
    st.dataframe(pd.DataFrame(rows).set_index("lane").T.map(cell), width="stretch")
    st.caption(
        "Allocated: slots in the blocks requests hold now. Holding tokens: slots with a token in them. "
        "Unused: allocated minus holding. 'Contiguous' is what the same requests would take if each "
        "reserved prompt + max_tokens up front, as static batching does. Shared: blocks in more "
        "than one request's table; cached: held by none, kept for a prefix hit (evicted least recently used "
        "first). Hit rate: prompt tokens served from the prefix cache ÷ prompt tokens looked up, since this "
        "page was first opened (every tab on it shows the same figures).")
    if rid is not None:
        block_table(rid, blocks)


def cell(v) -> str:
    """A figure as the table shows it: '–' where there is none (no prefix lookups yet, ...)."""
    if v is None:
        return "–"
    return f"{v:,}" if is_number(v) else str(v)


def block_table(rid: int, blocks: list[dict]) -> None:
    st.subheader(f"Request #{rid}'s block table, in the lane picked above", anchor=False)
    st.dataframe(pd.DataFrame(blocks).set_index("logical block"), width="stretch")
    st.caption("Each logical block points at a physical block. A block with more than one holder is shared: "
               "the prefix cache handed the same computed KV to every request that starts with those tokens. "
               "'From prefix cache': served at admission, never computed for this request.")


if lane is not None:
    fragmentation(lane, selected)
polled(2.0)(roofline_section)(svc)
