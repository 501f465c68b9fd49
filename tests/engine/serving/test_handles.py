"""RequestHandle streams an answer as it grows: its deltas add up to the final text, and the characters
held back (what might still become a stop string) are never streamed before the request ends."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from engine.request import RequestOutput
from engine.serving.handles import RequestHandle
from tiers import examples


@settings(max_examples=examples(200), deadline=None)
@given(pieces=st.lists(st.text(max_size=6), max_size=30), hold_back=st.integers(0, 8), cut=st.integers(0, 8))
def test_deltas_add_up_to_the_final_text_and_the_held_back_tail_waits(pieces, hold_back, cut):
    h = RequestHandle(7, "lane", "tag")
    h.accept(hold_back)
    text, streamed = "", []
    for piece in pieces:
        text += piece
        streamed.append(h.update(text))
        assert "".join(streamed) == text[:max(0, len(text) - hold_back)]
    # a stop string found at the end is cut off: never before what was streamed (it was held back)
    final = text[:max(len("".join(streamed)), len(text) - min(cut, hold_back))]
    streamed.append(h.finish(RequestOutput(7, [], [], final, "stop", 0.0, None, None)))
    assert "".join(streamed) == final == "".join(h)
