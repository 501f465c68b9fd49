"""A page made to meet Streamlit's race between a full run and the fragment runs queued behind it (see
pages/ui/polled.py): a click makes the first fragment (drawn inline in the full run the click starts) wait
while the second one's timer fires, then ask for another full run with st.rerun(); a line of text follows both
fragments. test_polled.py drives it in a browser."""
import sys
import time
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "pages"))
from ui.polled import polled  # noqa: E402

s = st.session_state
s.setdefault("runs", 0)
s.runs += 1


@polled(0.2)
def asks_for_a_full_run() -> None:
    if s.get("asked"):
        s.asked = False
        time.sleep(0.6)  # the other fragment's timer asks for its run meanwhile: queued behind the full run
        st.rerun()
    st.caption("asker")


@polled(0.2)
def ticks() -> None:
    st.markdown(f"tick {time.monotonic():.2f}")


if st.button("Ask for a full run"):
    s.asked = True
asks_for_a_full_run()
ticks()
st.markdown(f"The line after the fragments, full run {s.runs}")
