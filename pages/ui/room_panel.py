"""The presenter's "Let the room join" panel (room mode): a QR code and the short URL of /join, made
here with segno (no network), and a live count of participants and their requests."""
from __future__ import annotations

import io

import segno
import streamlit as st
from streamlit import config

from engine.room.access import is_loopback
from engine.api.join_link import join_url

from .polled import polled

COUNT_REFRESH_S = 2.0


@st.cache_data(max_entries=8)
def qr_png(url: str) -> bytes:
    buf = io.BytesIO()
    segno.make(url, error="m").save(buf, kind="png", scale=8, border=2, dark="#000", light="#fff")
    return buf.getvalue()


def room_join_panel(svc) -> None:
    """In the sidebar; call it for the presenter in room mode only (it lists who joined)."""
    address = config.get_option("server.address")
    url = join_url(st.context.url, address, config.get_option("server.port"))
    with st.sidebar.expander("Let the room join", icon=":material/qr_code_2:", expanded=True):
        st.image(qr_png(url), width="stretch")
        st.markdown(f"**{url.split('://', 1)[-1]}**")  # the short form people type
        st.caption("Phones send a prompt with a name; it runs in every lane, labelled with the name.")
        if is_loopback(address):
            st.warning("The server listens on this machine only, so phones cannot reach it: start it with "
                       "`--server.address 0.0.0.0`.")
        _counts(svc)


@polled(COUNT_REFRESH_S)
def _counts(svc) -> None:
    room = svc.participants.summary()
    n = room["participants"]
    r = room["requests"]
    st.metric("Joined", f"{n} {'person' if n == 1 else 'people'}", f"{r} request{'' if r == 1 else 's'}",
              delta_color="off", delta_arrow="off")
    rows = svc.participants.table()
    if rows:
        st.dataframe({"name": [p.name for p in rows], "requests": [p.requests for p in rows]},
                     hide_index=True, height=min(240, 38 + 35 * len(rows)))
