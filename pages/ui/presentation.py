"""Presentation mode: for a projector. Hides the sidebar and the page navigation, tightens the page's
margins and enlarges the text, so the first screen holds the controls' one line and the views."""
from __future__ import annotations

import streamlit as st

_CSS = """<style>
section[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stExpandSidebarButton"],
header[data-testid="stHeader"] { display: none !important; }
[data-testid="stMainBlockContainer"] { max-width: 100%; padding: 0.5rem 1.5rem 2rem; }
[data-testid="stMainBlockContainer"] [data-testid="stVerticalBlock"] { gap: 0.5rem; }
[data-testid="stMarkdownContainer"] p, [data-testid="stCaptionContainer"] { font-size: 1.25rem; }
</style>"""


def presentation_toggle() -> bool:
    """The toggle (on the page, not the sidebar it hides); True while on."""
    on = st.toggle("Presentation mode", key="large_text",
                   help="For a projector: hides the sidebar, enlarges text and the narration")
    if on:
        st.html(_CSS)
    return on
