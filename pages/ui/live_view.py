"""The live views: one keyed Streamlit v2 component that follows /engine/ws in the browser.

The component draws from the engine's own events (Gantt, batch slots, KV block map, utilization,
generated text, or one request's block table in ``mode="kv_detail"``). It keeps its socket and state
across reruns; Python only passes configuration and reads back the request the user picked.
"""
from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from engine.events import wire_contract
from engine.paths import LIVE_VIEW, live_view_js
from engine.untrusted import is_int

COMPONENT_NAME = "inflight_live_view"
VIEWS = ("gantt", "slots", "kv", "util", "text")
AXES = ("time", "iterations")
MODES = ("live", "kv_detail")



def _read(name: str) -> str:
    # Inline strings (they contain line breaks, so Streamlit does not take them for asset paths).
    return (LIVE_VIEW / name).read_text(encoding="utf-8")


# Registered once, at import. Not style-isolated: the tooltip and overlays are positioned against
# the page; our CSS is scoped under .ifl-root instead.
_COMPONENT = st.components.v2.component(
    COMPONENT_NAME,
    html=_read("live_view.html"),
    css=_read("live_view.css"),
    js=live_view_js(),  # every module, each declaring what it needs (assets/live/modules.js)
    isolate_styles=False,
)


def live_view(*, key: str, lanes: list[str], headers: dict[str, list[str]] | None = None,
              running: list[str] | None = None, axis: str = "time",
              views: Sequence[str] = VIEWS, large_text: bool = False,
              clear_after_s: float | None = None, selected: int | None = None,
              height: int | None = None, mode: str = "live", fit_first_screen: bool = False,
              controls: dict | None = None):
    """Mount the live views (one column per lane, sharing the time axis).

    key: the element key (required: it keeps the component, its socket and state, across reruns).
    lanes: the lane names to show, e.g. ["block 16", "block 128"].
    headers: lane -> short labels shown (as text) beside its name, e.g. from lane_headers().
    running: every lane the service ran when the page was drawn (default: lanes). When the running
        set changes (another tab, the socket's `lanes` command), the component reruns the page.
    axis: "time" (service seconds) or "iterations".
    views: any of "gantt", "slots", "kv", "util", "text", in display order.
    large_text: fonts and lines about 1.5x, for a projector.
    clear_after_s: ignore events older than this service-clock time (the "clear" button).
    selected: a request id to highlight (None: none); the user's own picks come back in the result.
    height: fixed height in px (views share it); None sizes to content (about 1750 px with all views).
    mode: "live", or "kv_detail" for one request's logical blocks -> block table -> physical pool.
    fit_first_screen: the Gantt and the batch slots take the rest of the browser's first screen (a
        projector), whatever its size; the other views follow below.
    controls: the presenter's controls as the page drew them ({"paused", "slow_motion_s",
        "auto_slow_motion"}); when the service's differ (a key, another tab), the component reruns the page.

    Returns the component result; ``result.selected`` is the request id the user picked (or None).
    """
    if not lanes or not all(isinstance(s, str) and s for s in lanes):
        raise ValueError(f"lanes must be a non-empty list of lane names, got {lanes!r}")
    if axis not in AXES:
        raise ValueError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    views = list(views)
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        raise ValueError(f"unknown view {unknown[0]!r}; known: {', '.join(VIEWS)}")
    if height is not None and (not isinstance(height, int) or height < 200):
        raise ValueError(f"height must be None or an integer >= 200 (px), got {height!r}")
    if selected is not None and not is_int(selected):
        raise ValueError(f"selected must be None or a request id, got {selected!r}")
    data = {
        "lanes": list(lanes), "headers": {n: list((headers or {}).get(n, [])) for n in lanes},
        "running": list(lanes if running is None else running),
        "axis": axis, "views": views, "large_text": bool(large_text),
        "clear_after_s": None if clear_after_s is None else float(clear_after_s),
        "selected": selected, "height": height, "mode": mode, "fit_first_screen": bool(fit_first_screen),
        "controls": controls,
        "contract": wire_contract(),  # how to read the events: step entry fields, phase names
    }
    return _COMPONENT(key=key, data=data, default={"selected": None, "running": None, "controls": None},
                      on_selected_change=_noop, on_running_change=_noop, on_controls_change=_noop,
                      height=height if height is not None else "content")


def _noop() -> None:
    pass
