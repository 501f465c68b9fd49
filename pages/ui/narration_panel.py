"""Under the live views: the running scenario's "what to watch" and the narration, computed from the
hub's events (engine/workshop/narration), refreshed every second. Sentences are text: escaped, never HTML."""
from __future__ import annotations

import html

import streamlit as st

from engine.workshop.scenarios.catalog import running_scenario
from engine.workshop.scenarios.headline import METRICS
from engine.untrusted import markdown_text

from .polled import polled
from .run_metrics import headline_line, narrator, run_metrics

SHOWN = 6
COMPACT = 1  # sentences shown above the views on a projector


def _line(s) -> str:
    who = "comparing lanes" if s.lane is None else s.lane
    return f'<li><span class="ifl-who">{html.escape(who)}</span> {html.escape(s.text)}</li>'


def _what_to_watch(svc, scenario, compact: bool) -> None:
    """The number the scenario is about (this run's, per lane) first, then what to look at."""
    with run_metrics(svc) as m:
        number = headline_line(svc, m, scenario.headline, svc.lane_names)
    number = number or f"{METRICS[scenario.headline[0]].title}, once this run's first requests finish"
    if compact:  # all of it, a size smaller (cut to one line, the projector showed less than it named)
        st.html(f'<div class="ifl-watch" style="font-size:0.92rem;line-height:1.35;color:#9aa4b5">'
                f'<b>What to watch:</b> <b style="color:#e8ecf3">{html.escape(number)}</b> · '
                f'{html.escape(scenario.watch)}</div>')
    else:
        st.info(f"**What to watch: {markdown_text(number)}**\n\n{markdown_text(scenario.watch)}", icon=":material/visibility:")


@polled(1.0)
def narration(svc, large: bool = False, compact: bool = False) -> None:
    """compact (a projector, above the views): "What to watch" in one line, and the latest sentences."""
    scenario = running_scenario(svc.wanted_lanes, svc.cfg)
    if scenario is not None:
        _what_to_watch(svc, scenario, compact)
    with narrator(svc) as told:
        said = told.recent(COMPACT if compact else SHOWN, now=svc.clock())
    if not said:
        st.caption("Narration: notable iterations are described here as they happen.")
        return
    size = "1.35rem" if compact else "1.6rem" if large else "1rem"
    place = " ifl-compact" if compact else ""  # above the views (a projector) or under them
    st.html(f'<ul class="ifl-narration{place}" style="font-size:{size};line-height:1.4;list-style:none;padding:0">'
            + "".join(_line(s) for s in said) + "</ul>"
            "<style>.ifl-narration li:first-child{font-weight:600}.ifl-who{opacity:.65;margin-right:.4em}"
            ".ifl-who::after{content:':'}</style>")
