"""The one-click button: run the chosen scenario (its lanes, then its request stream), or, on custom
lanes, send the first scenario's stream. Refusals (a viewer, someone else's stream) are shown."""
from __future__ import annotations

import streamlit as st

from engine.room.access import NotPresenter
from engine.workshop.scenarios import runner
from engine.workshop.scenarios.catalog import by_title, shipped

from .shortcuts import KEYS


def scenario_button(svc, client, choice: str, caption: bool = True) -> None:
    """caption: say under the button what the stream sends (off in the projector's one-line bar, where
    "What to watch" says it)."""
    scenario = by_title(choice)
    shown = scenario or shipped()[0]
    locked = shown.presenter_only and not client.presenter
    help_ = f"{shown.explain}. Goes to every lane."
    if locked:
        help_ += f" For the presenter: {runner.PRESENTER_ONLY}."
    if client.presenter:
        help_ += f" Keys: {KEYS}."
    # on a projector no tooltip unless it says why the button is off: clicked, it stayed over the narration
    if st.button("Run scenario" if scenario else "Send requests", icon=":material/bolt:", type="primary",
                 width="stretch", disabled=locked, help=help_ if caption or locked else None):
        try:
            start = runner.start if scenario else runner.fire
            st.session_state.stream = start(svc, shown, client)
        except (ValueError, NotPresenter) as e:
            st.warning(str(e))
    if caption:
        st.caption(shown.explain if not locked else "This stream is for the presenter: it names tenants and "
                   "priorities.")
    stream = st.session_state.get("stream")  # the one this tab fired last
    if stream is not None and stream.refused:
        st.warning(f"{stream.refused} of {len(stream.arrivals)} requests were refused: {stream.errors[-1]}")
