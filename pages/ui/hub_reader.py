"""Readers of the service's event hub that every browser session shares.

A page's fragments fold the hub's events into figures (the metric cards, the narration, the KV page's
tables). Folded once per browser session, every open tab paid for every event: at a GPU's pace a room of
phones cost the server's core, which the engines share, one fold of every step each, and as many copies
of the windows. Sessions that ask for the same reader (its key and what it starts from: a Clear views
time) now share one; it is folded by whichever session reruns first, under its lock, and goes when no
session holds it any more.
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager

import streamlit as st


class _Shared:
    """A reader, the lock its folds and reads take, and what identifies it among the shared ones."""

    def __init__(self, reader, ident: tuple):
        self.reader, self.ident, self.lock = reader, ident, threading.Lock()


_SHARED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # ident -> _Shared a session holds
_MADE = threading.Lock()


@contextmanager
def shared_reader(key: str, factory, hub, since: float | None = None):
    """The reader every session that asks for `key` from `since` shares (made by factory() on first use),
    caught up with `hub` and held for the block: read it inside the block only (another session's rerun
    folds into it otherwise), and take copies of what outlives the block."""
    ident = (key, since, hub)
    held = st.session_state.get(key)
    if not isinstance(held, _Shared) or held.ident != ident:
        with _MADE:
            held = _SHARED.get(ident)
            if held is None:
                held = _SHARED[ident] = _Shared(factory(), ident)
        st.session_state[key] = held  # (the session's reference keeps it alive)
    with held.lock:
        held.reader.consume(hub)
        yield held.reader
