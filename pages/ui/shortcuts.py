"""The presenter's keyboard shortcuts (assets/presenter/shortcuts.js), run in the page itself: its own
guard makes the listener once per page load, however often the script reruns."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

_JS = Path(__file__).resolve().parents[2] / "assets" / "presenter" / "shortcuts.js"
KEYS = "space pause/resume · → one iteration · s slow motion · 1-9 start scenario n"


def keyboard_shortcuts() -> None:
    st.html(f"<script>{_JS.read_text(encoding='utf-8')}</script>", unsafe_allow_javascript=True)
