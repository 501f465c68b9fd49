"""Fragments that rerun on a timer, each drawn inside a container of its own.

Why the container: when a queued run of a fragment starts right after a full run, before the server has
flushed that run's messages, Streamlit (1.67) drops the fragment's unsent elements but keeps the full run's
"finished" message. The browser then removes the fragment's block as stale, every element after it moves up
one place, and the fragment's next elements land on a sibling or past the end of the page ("Bad delta path
index": a blank tab). A second tab and a busy core made it likely. In a container every full run sends, the
fragment is the only child: a dropped block empties that container, and nothing else on the page moves."""
from __future__ import annotations

import functools
from typing import Callable

import streamlit as st


def polled(run_every: float | None) -> Callable[[Callable], Callable]:
    """Like st.fragment(run_every=...), the fragment placed in a container of its own wherever it is called."""
    def wrap(fn: Callable) -> Callable:
        fragment = st.fragment(run_every=run_every)(fn)

        @functools.wraps(fn)
        def placed(*args, **kwargs):
            with st.container():
                return fragment(*args, **kwargs)
        return placed
    return wrap
