"""Engine status banners: model loading progress on a first start, load and configure errors."""
from __future__ import annotations

import streamlit as st

from .polled import polled


def _settling(engines: dict) -> bool:
    return any((not e["ready"] and not e["error"]) or e["reconfiguring"] for e in engines.values())


def loading_banner(svc) -> None:
    """Polls once a second only while an engine loads or reconfigures; then one full rerun draws the
    settled page and the poll stops. Settled, it is drawn in place (no fragment): nothing at all when every
    engine is up (an empty fragment's container would still take a row's gap)."""
    if _settling(svc.status()["engines"]):
        polled(1.0)(_banner)(svc, polling=True)
    else:
        _banner(svc, polling=False)


def _banner(svc, polling: bool) -> None:
    """Errors, warm-up and loading progress, reconfigurations; the rerun that ends the poll."""
    engines = svc.status()["engines"]
    for s, e in engines.items():
        if e["error"]:
            st.error(f"Engine **{s}** could not start: {e['error']}")
    loading = [s for s, e in engines.items() if not e["ready"] and not e["error"]]
    warming = {s: engines[s]["warming_up"] for s in loading if engines[s].get("warming_up")}
    if warming:
        with st.status(f"Warming up {', '.join(warming)}…", expanded=True):
            for lane, w in warming.items():
                st.write(f"{lane}: {w['what']} ({w['done'] + 1} of {w['total']})")
            st.caption("Triton compiles each kernel variant an engine can reach once, before its first "
                       "request, so no request waits for a compile (seconds on a fresh machine; from "
                       "Triton's disk cache after).")
        loading = [s for s in loading if s not in warming]
    if loading:
        with st.status(f"Loading the model for {', '.join(loading)}…", expanded=True):
            st.write(svc.last_progress or "Reading weights…")
            st.caption("A first start fetches and converts the default model once (34 s measured "
                       "on a 2-core CPU); later starts load it in about 2 s.")
    busy = [s for s, e in engines.items() if e["reconfiguring"]]
    if busy:
        st.info(f"Applying new settings to {', '.join(busy)}: finishing in-flight requests first.")
    if polling and not _settling(engines):
        st.rerun()
