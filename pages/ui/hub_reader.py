"""A per-session reader of the service's event hub, kept across reruns in st.session_state."""
from __future__ import annotations

import streamlit as st


def session_reader(key: str, factory, hub):
    """The session's reader under `key` (made by factory() on first use), caught up with the hub."""
    reader = st.session_state.get(key)
    if reader is None:
        reader = st.session_state[key] = factory()
    reader.consume(hub)
    return reader
