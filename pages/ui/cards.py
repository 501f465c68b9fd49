"""Metric cards as one HTML block: a refresh re-renders one element instead of dozens of st.metric
widgets and columns (the browser may share the engine's CPU)."""
from __future__ import annotations

import html
from dataclasses import dataclass

import streamlit as st

STYLE = """<style>
.ifl-mc-row{display:grid;grid-template-columns:repeat(var(--n),minmax(0,1fr));gap:14px}
.ifl-mc-col{border:1px solid #263042;border-radius:8px;padding:10px 14px;background:#111827}
.ifl-mc-col h4{margin:0 0 6px;padding:0;font-size:1.15rem}
.ifl-mc-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:6px 14px}
.ifl-mc{padding:4px 0}
.ifl-mc-label{color:#9aa4b5;font-size:.9rem}
.ifl-mc-value{color:#e8ecf3;font-size:1.55rem;font-weight:600;font-variant-numeric:tabular-nums;line-height:1.25}
.ifl-mc-delta{font-size:.9rem;font-variant-numeric:tabular-nums}
.ifl-mc-delta.up{color:#34d399}.ifl-mc-delta.down{color:#f87171}.ifl-mc-delta.off{color:#9aa4b5}
.ifl-mc.lead{border-left:3px solid #60a5fa;padding-left:8px}
.ifl-mc-large .ifl-mc-grid{grid-template-columns:repeat(auto-fill,minmax(220px,1fr))}
.ifl-mc-large .ifl-mc-col h4{font-size:1.6rem}.ifl-mc-large .ifl-mc-label{font-size:1.2rem}
.ifl-mc-large .ifl-mc-value{font-size:2.2rem}.ifl-mc-large .ifl-mc-delta{font-size:1.15rem}
.ifl-mc-large .ifl-mc-result{font-size:1.6rem}
.ifl-mc-result{margin:0 0 10px;padding:8px 14px;border-radius:8px;background:#0f2a1d;border:1px solid #1f6f4a;
color:#d1fae5;font-size:1.2rem;font-weight:600}
</style>"""


@dataclass(frozen=True)
class Card:
    label: str
    value: str
    delta: str | None = None
    tone: str = "off"          # "up" (good), "down" (bad) or "off" (neutral)
    help: str | None = None
    lead: bool = False         # what the running scenario is about: marked, shown first


def show_cards(columns: list[tuple[str, list[Card]]], result: str | None = None, large: bool = False) -> None:
    """A run's result line (if any), then one row of lane columns, each a grid of cards; large: for a
    projector."""
    st.markdown(_cards_html(columns, result, large), unsafe_allow_html=True)


def _cards_html(columns: list[tuple[str, list[Card]]], result: str | None, large: bool) -> str:
    """Every text escaped."""
    cols = "".join(_column(name, cards) for name, cards in columns)
    top = f'<div class="ifl-mc-result" role="status">{html.escape(result)}</div>' if result else ""
    size = " ifl-mc-large" if large else ""
    return (f'{STYLE}<div class="ifl-mc-cards{size}">{top}<div class="ifl-mc-row" style="--n:{max(len(columns), 1)}">'
            f'{cols}</div></div>')


def _column(name: str, cards: list[Card]) -> str:
    return (f'<div class="ifl-mc-col"><h4>{html.escape(name)}</h4><div class="ifl-mc-grid">'
            + "".join(_card(c) for c in cards) + "</div></div>")


def _card(c: Card) -> str:
    title = f' title="{html.escape(c.help)}"' if c.help else ""
    delta = (f'<div class="ifl-mc-delta {c.tone}">{html.escape(c.delta)}</div>' if c.delta else "")
    lead = " lead" if c.lead else ""
    return (f'<div class="ifl-mc{lead}" data-label="{html.escape(c.label)}" data-value="{html.escape(c.value)}"{title}>'
            f'<div class="ifl-mc-label">{html.escape(c.label)}</div>'
            f'<div class="ifl-mc-value">{html.escape(c.value)}</div>{delta}</div>')
