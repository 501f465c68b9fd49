"""The presenter's trace download: what the views hold now, as a Chrome trace for Perfetto."""
from __future__ import annotations

import json

import streamlit as st

from engine.api.trace_route import FILE_NAME, hub_trace


def trace_download(svc) -> None:
    st.sidebar.download_button(
        "Download trace (Perfetto)", data=lambda: json.dumps(hub_trace(svc.hub)), file_name=FILE_NAME,
        mime="application/json", on_click="ignore", icon=":material/timeline:", width="stretch",
        help="The recent events of every lane (the hub's window) in Chrome's trace format: open it in "
             "ui.perfetto.dev or chrome://tracing. One process per lane, one track per request.")
