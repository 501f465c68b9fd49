"""The price per device hour that the cost figures use: one value per browser session, shared by the
playground's cards and the Benchmark page (a widget's own state is dropped when its page is left)."""
from __future__ import annotations

import streamlit as st

from engine.telemetry.cost import DEFAULT_PRICE_PER_HOUR, PRICE_ENV, default_price_per_hour

KEY = "price_per_hour"
_WIDGET = "price_per_hour_input"
LABEL = "Price per device hour ($)"
HELP = (f"What an hour of this device costs you (default ${DEFAULT_PRICE_PER_HOUR:.2f}, or {PRICE_ENV}); "
        "turns output tokens/s into dollars per million output tokens")


def current() -> float:
    if KEY not in st.session_state:
        try:
            st.session_state[KEY] = default_price_per_hour()
        except ValueError:  # a malformed environment variable: the documented default
            st.session_state[KEY] = DEFAULT_PRICE_PER_HOUR
    return st.session_state[KEY]


def remember(price: float) -> None:
    st.session_state[KEY] = float(price)


def price_input(container) -> float:
    """A number input (outside a form) showing and changing the session's price."""
    st.session_state[_WIDGET] = current()
    container.number_input(LABEL, 0.0, 10_000.0, step=0.1, format="%.2f", help=HELP, key=_WIDGET,
                           on_change=lambda: remember(st.session_state[_WIDGET]))
    return current()
